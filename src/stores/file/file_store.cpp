#include "stores/file/file_store.hpp"

#include "lock/features.hpp"
#include "util/forked.hpp"
#include "util/log.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

namespace dlock::file {

using lock::Outcome;
using util::Millis;

namespace {

// The longest a waiter blocks before it asks again (the helper keeps blocking meanwhile).
constexpr Millis longest_block{30'000};
// --limit N waits with a thread per slot in the helper: more would be a thread army.
constexpr int most_slots = 1024;

std::int64_t unix_ms()
{
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::int64_t unix_us()
{
  return std::chrono::duration_cast<std::chrono::microseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

// An I/O failure on the store's files as one line with the contract's exit code: no right
// to the directory is 77, a path that cannot be a lock directory 78, the rest 69.
Error io_error(int err, std::string_view what, const std::string& path)
{
  ExitCode code = ExitCode::unavailable;
  if (err == EACCES || err == EPERM) {
    code = ExitCode::auth;
  } else if (err == EROFS || err == ENOTDIR || err == ENOENT || err == ELOOP ||
             err == ENAMETOOLONG || err == EISDIR) {
    code = ExitCode::config;
  }
  return Error(code, "file store: cannot {} {}: {}", what, path, std::strerror(err));
}

int flock_retry(int fd, int op)
{
  int rc = 0;
  while ((rc = ::flock(fd, op)) < 0 && errno == EINTR) {
  }
  return rc;
}

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// Whether path still names the file open on fd.
bool names(const std::string& path, int fd)
{
  struct stat by_path {};
  struct stat by_fd {};
  return fd >= 0 && ::fstat(fd, &by_fd) == 0 && ::stat(path.c_str(), &by_path) == 0 &&
         same_file(by_fd, by_path);
}

std::string read_small(int fd)
{
  std::string text;
  std::array<char, 4096> buffer{};
  off_t offset = 0;
  while (text.size() < 65536) {
    ssize_t n = ::pread(fd, buffer.data(), buffer.size(), offset);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    text.append(buffer.data(), static_cast<std::size_t>(n));
    offset += n;
  }
  return text;
}

std::string read_path(const std::string& path)
{
  util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  return fd ? read_small(fd.get()) : std::string();
}

std::vector<std::string> entries(const std::string& dir)
{
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.empty() ? "/" : dir.c_str());
  if (d == nullptr) {
    return names;
  }
  while (dirent* e = ::readdir(d)) {
    names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Compatible kinds share a key: exclusive with shared, a semaphore with the same N only.
bool compatible(const lock::LockKind& a, const lock::LockKind& b)
{
  bool a_limit = a.mode == lock::LockKind::Mode::limit;
  bool b_limit = b.mode == lock::LockKind::Mode::limit;
  return a_limit == b_limit && (!a_limit || a.limit == b.limit);
}

// The live records of the directory (each still locked by its holder), by encoded name; the
// records of holders gone are removed on the way.
std::map<std::string, std::vector<Record>> live_records(const std::string& meta,
                                                        const std::string& only = {})
{
  std::map<std::string, std::vector<Record>> found;
  for (const std::string& entry : entries(meta)) {
    std::size_t plus = entry.find('+');
    if (plus == std::string::npos || (!only.empty() && entry.substr(0, plus) != only)) {
      continue;
    }
    std::string_view what = std::string_view(entry).substr(plus);
    bool final = what.starts_with("+by+");
    if (!final && !what.starts_with("+new+")) {
      continue;
    }
    std::string path = meta + "/" + entry;
    util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW));
    if (!fd) {
      continue;
    }
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
      ::unlink(path.c_str()); // its holder is gone (a record is locked before it is named)
      continue;
    }
    if (!final) {
      continue;
    }
    if (std::optional<Record> r = Record::parse(read_small(fd.get()))) {
      found[entry.substr(0, plus)].push_back(std::move(*r));
    }
  }
  for (auto& [encoded, records] : found) {
    std::sort(records.begin(), records.end(),
              [](const Record& a, const Record& b) { return a.acquired_ms < b.acquired_ms; });
  }
  return found;
}

// The record at path if its holder still holds it (its lock on the record is held).
std::optional<Record> live_record(const std::string& path)
{
  util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW));
  if (!fd || ::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
    return std::nullopt;
  }
  return Record::parse(read_small(fd.get()));
}

std::string host_name()
{
  std::array<char, 256> host{};
  return ::gethostname(host.data(), host.size() - 1) == 0 ? std::string(host.data()) : "";
}

// A holder without a record (flock(1), another program): what /proc says of its process.
lock::HolderInfo holder_of_pid(std::int64_t pid)
{
  lock::HolderInfo holder;
  holder.host = host_name();
  holder.pid = pid;
  std::string proc = "/proc/" + std::to_string(pid);
  struct stat st {};
  if (::stat(proc.c_str(), &st) == 0) {
    const passwd* entry = ::getpwuid(st.st_uid);
    holder.user = entry != nullptr && entry->pw_name != nullptr ? entry->pw_name
                                                                : std::to_string(st.st_uid);
  }
  std::string command = read_path(proc + "/cmdline");
  while (!command.empty() && command.back() == '\0') {
    command.pop_back();
  }
  std::replace(command.begin(), command.end(), '\0', ' ');
  holder.command = command.substr(0, lock::max_command_length);
  return holder;
}

lock::HolderInfo holder_of(const Record& r)
{
  lock::HolderInfo holder;
  holder.host = r.host;
  holder.pid = r.pid;
  holder.user = r.user;
  holder.command = r.command;
  holder.acquired_ms = r.acquired_ms;
  holder.fence = r.fence;
  holder.ttl_ms = r.ttl_ms;
  return holder;
}

std::int64_t read_fence(const Layout& layout)
{
  std::string text = read_path(layout.fence_path());
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      break;
    }
    value = value * 10 + (c - '0');
  }
  return value;
}

// What the kernel and the records say about one lock name.
struct Observed {
  bool held = false;
  lock::LockKind kind{};
  std::vector<lock::HolderInfo> holders; // longest held first
  std::int64_t waiters = 0;
};

// The lock file and slot files of layout that exist, from the directory's entries.
std::vector<std::string> files_of(const Layout& layout, const std::vector<std::string>& dir_entries)
{
  std::vector<std::string> files;
  std::string slot_prefix = layout.encoded + "+slot.";
  for (const std::string& entry : dir_entries) {
    if (entry == layout.encoded || entry.starts_with(slot_prefix) || entry == layout.encoded + "+queue") {
      files.push_back(layout.dir + "/" + entry);
    }
  }
  return files;
}

Observed observe(const Layout& layout, const std::vector<std::string>& files,
                 const std::vector<ProcLock>& locks, const std::vector<Record>& records)
{
  Observed seen;
  std::vector<const ProcLock*> granted;
  bool on_slots = false;
  int slot_files = 0;
  for (const std::string& path : files) {
    // The turnstile's holder waits for the lock, as do those blocked on it.
    bool turnstile = path == layout.turnstile_path();
    bool slot = !turnstile && path.size() > layout.lock_path().size();
    slot_files += slot ? 1 : 0;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      continue;
    }
    for (const ProcLock& l : locks) {
      if (l.inode != st.st_ino || l.dev_major != major(st.st_dev) || l.dev_minor != minor(st.st_dev)) {
        continue;
      }
      if (l.blocked) {
        ++seen.waiters; // a waiting exclusive one blocks on the lock file, with the turnstile kept
      } else if (!turnstile) {
        granted.push_back(&l);
        on_slots = on_slots || slot;
      }
    }
  }
  seen.held = !granted.empty() || !records.empty();
  if (!records.empty()) {
    seen.kind = records.front().kind;
    for (const Record& r : records) {
      seen.holders.push_back(holder_of(r));
    }
    return seen;
  }
  for (const ProcLock* l : granted) {
    seen.holders.push_back(holder_of_pid(l->pid));
  }
  if (on_slots) {
    seen.kind = lock::LockKind::semaphore(std::max(2, slot_files));
  } else if (!granted.empty() && !granted.front()->write) {
    seen.kind = lock::LockKind::shared();
  }
  return seen;
}

std::vector<ProcLock> proc_locks() { return parse_proc_locks(read_path("/proc/locks")); }

lock::LockStatus status_of(const Layout& layout, std::string name, const Observed& seen)
{
  lock::LockStatus status;
  status.name = std::move(name);
  status.ttl_ms = -1; // no expiry: the lock lives as long as its process
  status.server_time_ms = unix_ms();
  status.last_fence = read_fence(layout);
  status.waiters = seen.waiters;
  if (!seen.held) {
    return status;
  }
  status.held = true;
  status.kind = seen.kind;
  if (!seen.holders.empty()) {
    status.holder = seen.holders.front();
  }
  if (seen.kind.has_slots()) {
    for (const lock::HolderInfo& holder : seen.holders) {
      status.slots.push_back(lock::SlotHolder{holder, -1});
    }
  }
  return status;
}

// The helper: blocks in flock(2) on each description (a thread each), writes the index of
// the first one locked to the pipe and exits, which ends the other threads' waits.
struct HelperThread {
  int fd;
  int op;
  int pipe;
  int index;
  int turnstile; // exclusive and --shared: passed first (held by a waiting exclusive one)
  int turnstile_op;
};

[[noreturn]] void helper_wait(const HelperThread& t)
{
  if (t.turnstile >= 0 && flock_retry(t.turnstile, t.turnstile_op) != 0) {
    ::_exit(1);
  }
  if (flock_retry(t.fd, t.op) == 0) {
    if (t.turnstile >= 0) {
      flock_retry(t.turnstile, LOCK_UN);
    }
    ssize_t ignored = ::write(t.pipe, &t.index, sizeof t.index);
    (void)ignored;
    ::_exit(0);
  }
  ::_exit(1);
}

void* helper_thread(void* arg)
{
  helper_wait(*static_cast<HelperThread*>(arg));
}

[[noreturn]] void helper_main(const std::vector<int>& fds, int op, int pipe, pid_t parent,
                              int turnstile)
{
  ::prctl(PR_SET_PDEATHSIG, SIGKILL); // dlock gone: stop waiting, take nothing
  if (::getppid() != parent) {
    ::_exit(1);
  }
  std::vector<HelperThread> threads;
  threads.reserve(fds.size());
  for (std::size_t i = 0; i < fds.size(); ++i) {
    threads.push_back(HelperThread{fds[i], op, pipe, static_cast<int>(i), turnstile, op});
  }
  pthread_attr_t attributes;
  ::pthread_attr_init(&attributes);
  ::pthread_attr_setstacksize(&attributes, 64 * 1024);
  for (std::size_t i = 1; i < threads.size(); ++i) {
    pthread_t thread;
    if (::pthread_create(&thread, &attributes, helper_thread, &threads[i]) != 0) {
      ::_exit(1);
    }
  }
  helper_wait(threads.front());
}

} // namespace

FileStore::FileStore(std::string directory) : m_dir(std::move(directory)), m_pid(::getpid()) {}

FileStore::~FileStore()
{
  for (auto& [name, n] : m_named) {
    stop_helper(n);
  }
}

void FileStore::answer(Op op, std::optional<Error> error)
{
  m_ready.push_back(Outcome{op, std::move(error), false, {}, {}});
}

FileStore::Named* FileStore::find(const lock::LockName& name)
{
  auto found = m_named.find(name.str());
  return found == m_named.end() ? nullptr : &found->second;
}

void FileStore::prepare_directory()
{
  if (m_prepared) {
    return;
  }
  // mkdir -p: each missing component with 0777 less the umask.
  struct stat existing {};
  bool exists = ::stat(m_dir.empty() ? "/" : m_dir.c_str(), &existing) == 0 && S_ISDIR(existing.st_mode);
  for (std::size_t slash = 1; !exists && slash <= m_dir.size(); ++slash) {
    if (slash != m_dir.size() && m_dir[slash] != '/') {
      continue;
    }
    std::string part = m_dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      throw io_error(errno, "create the lock directory", part);
    }
  }
  struct stat dir {};
  if (::stat(m_dir.empty() ? "/" : m_dir.c_str(), &dir) != 0) {
    throw io_error(errno, "use the lock directory", m_dir);
  }
  if (!S_ISDIR(dir.st_mode)) {
    throw io_error(ENOTDIR, "use the lock directory", m_dir);
  }
  if (::access(m_dir.empty() ? "/" : m_dir.c_str(), W_OK | X_OK) != 0) {
    // Locking an existing file needs only read access; creating one needs the directory.
    util::log_verbose("file store: {} is not writable ({}); only lock files that exist can be "
                      "taken",
                      m_dir, std::strerror(errno));
  }
  std::string meta = m_dir + "/.dlock";
  if (::mkdir(meta.c_str(), 0777) == 0) {
    // A directory every user may write (/run/lock is 1777) gets a .dlock they may write too.
    if ((dir.st_mode & S_IWOTH) != 0) {
      ::chmod(meta.c_str(), dir.st_mode & 07777);
    }
  } else if (errno != EEXIST) {
    m_records = false;
    m_fencing = false;
    util::log_verbose("file store: no holder records and no fencing tokens: cannot create {}: {}",
                      meta, std::strerror(errno));
  }
  m_prepared = true;
}

void FileStore::open_turnstile(Named& n)
{
  std::string turnstile = n.layout.turnstile_path();
  n.turnstile.reset(::open(turnstile.c_str(), O_RDONLY | O_CREAT | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC, 0666));
  if (!n.turnstile) {
    // A lock file that exists can be locked in a directory dlock may not write.
    util::log_verbose("file store: no turnstile (a waiting exclusive holder does not hold back "
                      "--shared ones): cannot open {}: {}",
                      turnstile, std::strerror(errno));
  }
}

void FileStore::open_candidates(Named& n)
{
  if (!n.candidates.empty()) {
    return;
  }
  std::vector<std::string> paths;
  if (n.kind.mode == lock::LockKind::Mode::limit) {
    for (int slot = 0; slot < n.kind.limit; ++slot) {
      paths.push_back(n.layout.slot_path(slot));
    }
  } else {
    paths.push_back(n.layout.lock_path());
    if (n.kind.mode == lock::LockKind::Mode::shared) {
      open_turnstile(n);
    }
  }
  for (const std::string& path : paths) {
    // Read-only, as flock(1) opens it: whoever may read a lock file may lock it. The
    // command gets the held one through inherited_descriptors(), so the kernel frees the
    // lock only once the command is gone too.
    int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
      int err = errno;
      drop_candidates(n);
      throw io_error(err, "open the lock file", path);
    }
    n.candidates.emplace_back(fd);
    n.candidate_paths.push_back(path);
  }
}

bool FileStore::try_candidates(Named& n, const lock::AcquireRequest& request)
{
  int op = (n.kind.mode == lock::LockKind::Mode::shared ? LOCK_SH : LOCK_EX) | LOCK_NB;
  for (int attempt = 0; attempt < 100; ++attempt) {
    open_candidates(n);
    int locked = n.granted;
    // A --shared holder passes the turnstile first, which a waiting exclusive holder keeps
    // (so that shared ones coming and going cannot starve it).
    bool shared = n.kind.mode == lock::LockKind::Mode::shared;
    shared = shared && n.turnstile;
    if (locked < 0 && shared && flock_retry(n.turnstile.get(), LOCK_SH | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) {
        int err = errno;
        drop_candidates(n);
        throw io_error(err, "lock", n.layout.turnstile_path());
      }
      n.writer_waiting = true;
      return false;
    }
    n.writer_waiting = false;
    for (std::size_t i = 0; locked < 0 && i < n.candidates.size(); ++i) {
      if (flock_retry(n.candidates[i].get(), op) == 0) {
        locked = static_cast<int>(i);
      } else if (errno != EWOULDBLOCK) {
        int err = errno;
        drop_candidates(n);
        throw io_error(err, "lock", n.candidate_paths[i]);
      }
    }
    if (shared) {
      flock_retry(n.turnstile.get(), LOCK_UN);
    }
    if (locked < 0) {
      return false;
    }
    if (names(n.candidate_paths[static_cast<std::size_t>(locked)],
              n.candidates[static_cast<std::size_t>(locked)].get())) {
      take(n, locked, request);
      return true;
    }
    // The file was removed or replaced after it was opened (release --force): the lock is
    // on a file no one else will open. Start again from the path.
    drop_candidates(n);
  }
  throw Error(ExitCode::unavailable, "file store: the lock files of '{}' keep being replaced",
              n.layout.encoded);
}

void FileStore::take(Named& n, int i, const lock::AcquireRequest& request)
{
  stop_helper(n);
  auto index = static_cast<std::size_t>(i);
  n.lock = std::move(n.candidates[index]);
  n.path = n.candidate_paths[index];
  n.slot = n.kind.mode == lock::LockKind::Mode::limit ? i : -1;
  drop_candidates(n); // the other slots: unlocked in case a helper thread took one too
  n.held = true;
  n.loss_reported = false;
  n.fence = m_fencing ? next_fence(n.layout) : 0;
  struct stat st {};
  ::fstat(n.lock.get(), &st);
  if (m_records) {
    write_record(n, request, st.st_ino);
  }
  if (!m_inotify) {
    m_inotify.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  }
  if (m_inotify) {
    constexpr std::uint32_t gone = IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF;
    n.watch_lock = ::inotify_add_watch(m_inotify.get(), n.path.c_str(), gone);
    if (n.record) {
      n.watch_record = ::inotify_add_watch(m_inotify.get(), n.record_path.c_str(), gone);
    }
  }
}

std::int64_t FileStore::next_fence(const Layout& layout)
{
  std::string path = layout.fence_path();
  bool created = true;
  util::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (!fd && errno == EEXIST) {
    created = false;
    fd.reset(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  }
  struct stat shared_dir {};
  if (fd && created && ::stat(layout.meta_dir().c_str(), &shared_dir) == 0 &&
      (shared_dir.st_mode & S_IWOTH) != 0) {
    ::fchmod(fd.get(), 0666); // a directory shared by every user: a counter they all advance
  }
  if (!fd || flock_retry(fd.get(), LOCK_EX) != 0) {
    m_fencing = false;
    util::log_verbose("file store: no fencing token: cannot update {}: {}", path, std::strerror(errno));
    return 0;
  }
  std::int64_t last = 0;
  for (char c : read_small(fd.get())) {
    if (c < '0' || c > '9') {
      break;
    }
    last = last * 10 + (c - '0');
  }
  // A missing counter starts above any token it can have issued: from the clock in µs.
  std::int64_t next = last > 0 ? last + 1 : std::max<std::int64_t>(1, unix_us());
  std::string text = fmt::format("{:020}\n", next); // one width: rewritten in place
  bool ok = ::pwrite(fd.get(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()) &&
            ::fdatasync(fd.get()) == 0;
  if (ok && created) {
    util::UniqueFd meta(::open(layout.meta_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ok = meta && ::fsync(meta.get()) == 0;
  }
  flock_retry(fd.get(), LOCK_UN);
  if (!ok) {
    m_fencing = false;
    util::log_verbose("file store: no fencing token: cannot write {}: {}", path, std::strerror(errno));
    return 0;
  }
  return next;
}

void FileStore::write_record(Named& n, const lock::AcquireRequest& request, std::uint64_t inode)
{
  std::string fingerprint = token_fingerprint(request.token);
  std::string fresh = n.layout.new_record_path(fingerprint);
  std::string path = n.layout.record_path(fingerprint);
  // Locked before it is named +by+, so that a record without a lock is always a dead one.
  util::UniqueFd fd(::open(fresh.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC, 0644));
  Record r;
  r.name = n.name;
  r.kind = n.kind;
  r.slot = n.slot;
  r.inode = inode;
  r.user = request.holder.user;
  r.host = request.holder.host;
  r.pid = request.holder.pid;
  r.acquired_ms = unix_ms();
  r.fence = n.fence;
  r.ttl_ms = request.ttl.count();
  r.command = request.holder.command;
  std::string line = r.serialize();
  if (!fd || flock_retry(fd.get(), LOCK_EX) != 0 ||
      ::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
      ::rename(fresh.c_str(), path.c_str()) != 0) {
    m_records = false;
    util::log_verbose("file store: no holder record (status shows the pid only): cannot write {}: {}",
                      path, std::strerror(errno));
    ::unlink(fresh.c_str());
    return;
  }
  n.record = std::move(fd);
  n.record_path = path;
}

void FileStore::start_acquire(const lock::LockName& name, const lock::AcquireRequest& request)
{
  auto [it, inserted] = m_named.try_emplace(name.str(), Layout(m_dir, name.str()));
  Named& n = it->second;
  n.name = name.str();
  if (n.held && n.token == request.token) {
    // Asked again for a lock held (a retry after a lost answer): it is ours.
    Outcome outcome{Op::acquire, std::nullopt, false, {}, {}};
    outcome.acquire.acquired = true;
    outcome.acquire.fence = n.fence;
    m_ready.push_back(std::move(outcome));
    return;
  }
  if (request.kind.mode == lock::LockKind::Mode::limit && request.kind.limit > most_slots) {
    answer(Op::acquire, Error(ExitCode::usage, "--limit {}: the file store has a slot file per "
                                               "holder and takes --limit {} at most",
                              request.kind.limit, most_slots));
    return;
  }
  if (n.kind != request.kind) {
    drop_candidates(n);
  }
  n.kind = request.kind;
  n.token = request.token;
  Outcome outcome{Op::acquire, std::nullopt, false, {}, {}};
  lock::AcquireResult& result = outcome.acquire;
  try {
    prepare_directory();
    std::vector<Record> records = live_records(n.layout.meta_dir(), n.layout.encoded)[n.layout.encoded];
    for (const Record& r : records) {
      if (!compatible(r.kind, request.kind)) {
        drop_candidates(n);
        result.kind_in_use = r.kind;
        m_ready.push_back(std::move(outcome));
        return;
      }
    }
    if (try_candidates(n, request)) {
      result.acquired = true;
      result.fence = n.fence;
      m_ready.push_back(std::move(outcome));
      return;
    }
    Observed seen = observe(n.layout, files_of(n.layout, entries(m_dir)), proc_locks(), records);
    result.holder_ttl_ms = n.writer_waiting && seen.holders.empty() ? -3 : -1; // no expiry
    if (!seen.holders.empty()) {
      result.holder = seen.holders.front();
    }
    result.holders = static_cast<std::int64_t>(seen.holders.size());
    Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
    result.block = std::min(cap, longest_block);
    if (request.ticket.mode == lock::WaitMode::once) {
      drop_candidates(n);
    }
    m_ready.push_back(std::move(outcome));
  } catch (const Error& error) {
    if (!n.held) {
      drop_candidates(n);
    }
    answer(Op::acquire, error);
  }
}

void FileStore::start_helper(Named& n)
{
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw Error(ExitCode::internal, "pipe failed: {}", std::strerror(errno));
  }
  util::UniqueFd read_end(ends[0]);
  util::UniqueFd write_end(ends[1]);
  std::vector<int> fds;
  for (const util::UniqueFd& fd : n.candidates) {
    fds.push_back(fd.get());
  }
  int op = n.kind.mode == lock::LockKind::Mode::shared ? LOCK_SH : LOCK_EX;
  if (n.kind.mode == lock::LockKind::Mode::exclusive && !n.turnstile) {
    open_turnstile(n); // only once it waits: an uncontended name leaves no NAME+queue
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    util::run_forked([&] { helper_main(fds, op, write_end.get(), parent, n.turnstile.get()); }, 1);
  }
  if (pid < 0) {
    throw Error(ExitCode::internal, "fork failed: {}", std::strerror(errno));
  }
  n.helper = pid;
  n.helper_pipe = std::move(read_end);
}

void FileStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket&,
                                    Millis block)
{
  Named* n = find(name);
  if (n == nullptr || n->held || n->candidates.empty() || n->granted >= 0) {
    answer(Op::wait_for_wake);
    return;
  }
  try {
    if (n->helper < 0) {
      start_helper(*n);
    }
  } catch (const Error& error) {
    answer(Op::wait_for_wake, error);
    return;
  }
  n->wait_pending = true;
  n->block_until = util::monotonic_now() + block;
}

void FileStore::on_helper(const std::string& name)
{
  auto found = m_named.find(name);
  if (found == m_named.end()) {
    return;
  }
  Named& n = found->second;
  int index = -1;
  ssize_t got = ::read(n.helper_pipe.get(), &index, sizeof index);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
    return;
  }
  stop_helper(n);
  std::optional<Error> error;
  if (got == sizeof index && index >= 0 && static_cast<std::size_t>(index) < n.candidates.size()) {
    n.granted = index;
  } else {
    error = Error(ExitCode::unavailable, "file store: waiting for the lock file {} failed",
                  n.candidate_paths.empty() ? n.layout.lock_path() : n.candidate_paths.front());
    drop_candidates(n);
  }
  if (n.wait_pending) {
    n.wait_pending = false;
    answer(Op::wait_for_wake, error);
  }
}

void FileStore::stop_helper(Named& n) noexcept
{
  if (n.helper > 0 && ::getpid() == m_pid) {
    ::kill(n.helper, SIGKILL);
    while (::waitpid(n.helper, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  n.helper = -1;
  n.helper_pipe.reset();
}

void FileStore::drop_candidates(Named& n) noexcept
{
  stop_helper(n);
  for (util::UniqueFd& fd : n.candidates) {
    if (fd && ::getpid() == m_pid) {
      flock_retry(fd.get(), LOCK_UN); // whatever the helper may have taken
    }
  }
  if (n.turnstile && ::getpid() == m_pid) {
    flock_retry(n.turnstile.get(), LOCK_UN); // a helper's pass, or a waiting exclusive one's
  }
  n.turnstile.reset();
  n.candidates.clear();
  n.candidate_paths.clear();
  n.granted = -1;
  n.wait_pending = false;
}

bool FileStore::still_ours(const Named& n) const
{
  return n.held && names(n.path, n.lock.get()) && (!n.record || names(n.record_path, n.record.get()));
}

void FileStore::drop_hold(Named& n) noexcept
{
  if (m_inotify) {
    for (int wd : {n.watch_lock, n.watch_record}) {
      if (wd >= 0) {
        ::inotify_rm_watch(m_inotify.get(), wd);
      }
    }
  }
  n.watch_lock = n.watch_record = -1;
  if (::getpid() == m_pid) {
    if (n.record && names(n.record_path, n.record.get())) {
      ::unlink(n.record_path.c_str()); // before the unlock: a record outlives no lock
    }
    if (n.lock) {
      flock_retry(n.lock.get(), LOCK_UN); // the command's copy of the descriptor too
    }
  }
  n.record.reset();
  n.lock.reset();
  n.held = false;
}

void FileStore::start_renew(const lock::LockName& name, const lock::RenewRequest& request)
{
  Outcome outcome{Op::renew, std::nullopt, false, {}, {}};
  Named* n = find(name);
  if (n != nullptr && n->held && n->token == request.token) {
    outcome.slot = n->kind.has_slots();
    outcome.held = still_ours(*n);
    m_ready.push_back(std::move(outcome));
    return;
  }
  // Held by another process (a nested run checks its caller's token): its live record, for
  // the file that still has the inode it locked.
  Layout layout(m_dir, name.str());
  if (std::optional<Record> r = live_record(layout.record_path(token_fingerprint(request.token)))) {
    struct stat st {};
    std::string path = r->slot >= 0 ? layout.slot_path(r->slot) : layout.lock_path();
    outcome.held = r->name == name.str() && ::stat(path.c_str(), &st) == 0 && st.st_ino == r->inode;
    outcome.slot = r->kind.has_slots();
  }
  m_ready.push_back(std::move(outcome));
}

void FileStore::start_release(const lock::LockName& name, const std::string& token)
{
  Outcome outcome{Op::release, std::nullopt, false, {}, {}};
  Named* n = find(name);
  if (!token.empty() && n != nullptr && n->token == token && n->held) {
    outcome.held = still_ours(*n);
    drop_hold(*n);
    drop_candidates(*n);
    m_ready.push_back(std::move(outcome));
    return;
  }
  Layout layout(m_dir, name.str());
  std::vector<std::string> dir_entries = entries(m_dir);
  std::vector<Record> records = live_records(layout.meta_dir(), layout.encoded)[layout.encoded];
  if (token.empty()) {
    // --force: the holders' files go (their next check, at once by inotify, finds them
    // replaced); the fencing counter stays.
    std::vector<std::string> files = files_of(layout, dir_entries);
    outcome.held = observe(layout, files, proc_locks(), records).held;
    for (const std::string& path : files) {
      ::unlink(path.c_str());
    }
    for (const std::string& entry : entries(layout.meta_dir())) {
      if (entry.starts_with(layout.encoded + "+by+") || entry.starts_with(layout.encoded + "+new+")) {
        ::unlink((layout.meta_dir() + "/" + entry).c_str());
      }
    }
    m_ready.push_back(std::move(outcome));
    return;
  }
  // Another process's token: its record goes, and the file it locked unless shared with others.
  std::string path = layout.record_path(token_fingerprint(token));
  std::optional<Record> r = live_record(path);
  if (r && r->name == name.str()) {
    outcome.held = true;
    ::unlink(path.c_str());
    if (r->kind.mode != lock::LockKind::Mode::shared) {
      std::string file = r->slot >= 0 ? layout.slot_path(r->slot) : layout.lock_path();
      struct stat st {};
      if (::stat(file.c_str(), &st) == 0 && st.st_ino == r->inode) {
        ::unlink(file.c_str());
      }
    }
  }
  m_ready.push_back(std::move(outcome));
}

void FileStore::start_withdraw(const lock::LockName& name, const lock::WaitTicket&)
{
  if (Named* n = find(name); n != nullptr && !n->held) {
    drop_candidates(*n);
  }
  answer(Op::withdraw);
}

void FileStore::start_raise_fence(const lock::LockName&, std::int64_t) { answer(Op::raise_fence); }

void FileStore::start_gate(const lock::LockName&, const lock::GateRequest&)
{
  answer(Op::gate, lock::refusal(*this, lock::Feature::coordinate));
}

void FileStore::start_set_latch(const lock::LockName&, std::int64_t, Millis)
{
  answer(Op::set_latch, lock::refusal(*this, lock::Feature::coordinate));
}

void FileStore::start_count_down(const lock::LockName&)
{
  answer(Op::count_down, lock::refusal(*this, lock::Feature::coordinate));
}

void FileStore::on_inotify()
{
  alignas(inotify_event) std::array<char, 4096> buffer{};
  while (::read(m_inotify.get(), buffer.data(), buffer.size()) > 0) {
  }
  for (auto& [name, n] : m_named) {
    if (n.held && !n.loss_reported && !still_ours(n)) {
      n.loss_reported = true;
      Outcome lost{Op::disconnected,
                   Error(ExitCode::lost, "the lock file {} was removed or replaced", n.path), false,
                   {}, {}};
      lost.lease_ended = true; // the holder confirms at once, and finds it lost
      m_ready.push_back(std::move(lost));
    }
  }
}

void FileStore::watch(util::EventLoop& loop)
{
  util::TimePoint now = util::monotonic_now();
  if (!m_ready.empty()) {
    loop.wake_at(now);
  }
  bool holding = false;
  for (auto& [name, n] : m_named) {
    holding = holding || n.held;
    if (n.helper_pipe) {
      std::string key = name;
      loop.watch(n.helper_pipe.get(), POLLIN, [this, key](short) { on_helper(key); });
    }
    if (n.wait_pending) {
      loop.wake_at(n.block_until);
    }
  }
  if (holding && m_inotify) {
    loop.watch(m_inotify.get(), POLLIN, [this](short) { on_inotify(); });
  }
}

std::optional<Outcome> FileStore::next_outcome()
{
  util::TimePoint now = util::monotonic_now();
  for (auto& [name, n] : m_named) {
    if (n.wait_pending && now >= n.block_until) {
      n.wait_pending = false; // not woken within the block: the caller asks again
      answer(Op::wait_for_wake);
    }
  }
  if (m_ready.empty()) {
    return std::nullopt;
  }
  Outcome outcome = std::move(m_ready.front());
  m_ready.pop_front();
  return outcome;
}

void FileStore::abandon() noexcept
{
  for (auto it = m_named.begin(); it != m_named.end();) {
    if (it->second.held) {
      it->second.wait_pending = false;
      ++it;
    } else {
      drop_candidates(it->second);
      it = m_named.erase(it);
    }
  }
  m_ready.clear();
}

Error FileStore::timed_out() noexcept
{
  abandon();
  return Error(ExitCode::unavailable, "file store: {} did not answer in time", m_dir);
}

std::string FileStore::left_behind(Millis) const
{
  return "the kernel frees it once dlock and its command have exited";
}

std::string FileStore::loss_cause() const
{
  return "its lock file was removed or replaced (release --force, or someone deleted it)";
}

std::vector<int> FileStore::inherited_descriptors() const
{
  std::vector<int> fds;
  for (const auto& [key, n] : m_named) {
    if (n.held && n.lock) {
      fds.push_back(n.lock.get());
    }
  }
  return fds;
}

lock::LockStatus FileStore::status(const lock::LockName& name, util::TimePoint)
{
  Layout layout(m_dir, name.str());
  std::vector<Record> records = live_records(layout.meta_dir(), layout.encoded)[layout.encoded];
  Observed seen = observe(layout, files_of(layout, entries(m_dir)), proc_locks(), records);
  return status_of(layout, name.str(), seen);
}

std::vector<lock::LockStatus> FileStore::list(std::string_view pattern, Millis)
{
  std::vector<std::string> dir_entries = entries(m_dir);
  std::map<std::string, std::vector<Record>> records = live_records(m_dir + "/.dlock");
  std::set<std::string> encoded_names;
  for (const std::string& entry : dir_entries) {
    if (entry.empty() || entry[0] == '.') {
      continue;
    }
    encoded_names.insert(entry.substr(0, entry.find('+')));
  }
  for (const auto& [encoded, rs] : records) {
    encoded_names.insert(encoded);
  }
  std::vector<ProcLock> locks = proc_locks();
  std::string glob(pattern.empty() ? "*" : pattern);
  std::vector<lock::LockStatus> found;
  for (const std::string& encoded : encoded_names) {
    const std::vector<Record>& rs = records[encoded];
    std::string name = !rs.empty() ? rs.front().name : lock_name_of(encoded).value_or(encoded);
    Layout layout(m_dir, name);
    layout.encoded = encoded;
    Observed seen = observe(layout, files_of(layout, dir_entries), locks, rs);
    if (!seen.held || ::fnmatch(glob.c_str(), name.c_str(), 0) != 0) {
      continue;
    }
    found.push_back(status_of(layout, name, seen));
  }
  std::sort(found.begin(), found.end(),
            [](const lock::LockStatus& a, const lock::LockStatus& b) { return a.name < b.name; });
  return found;
}

} // namespace dlock::file
