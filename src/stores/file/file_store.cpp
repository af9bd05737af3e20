#include "stores/file/file_store.hpp"

#include "lock/features.hpp"
#include "stores/file/history.hpp"
#include "util/files.hpp"
#include "util/forked.hpp"
#include "util/log.hpp"
#include "util/random.hpp"
#include "util/sha256.hpp"
#include "util/text.hpp"

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
#include <charconv>
#include <chrono>
#include <cstring>
#include <set>
#include <tuple>

namespace dlock::file {

using lock::Outcome;
using util::Millis;

namespace {

// The longest a waiter blocks before it asks again (the helper keeps blocking meanwhile).
constexpr Millis longest_block{30'000};
// After a close that woke a waiter while the file still looked locked, the one more look:
// the kernel announces a close just before it frees the flocks of what was closed.
constexpr Millis after_close{100};
// A lock file held without a holder record is counted as a leader (flock(1)'s) once it lasted
// this long: a dlock between its flock and its record (the fencing counter's fdatasync on the
// way) is not a leader of its own, and its record's arrival wakes the watcher at once.
constexpr Millis unrecorded_grace{1'000};
// A holder checks that its lock file and record are still its own, and looks for a --replace
// request, this often (stat calls, no inotify) until it has held the lock watch_held_after;
// then inotify watches them. Closing an inotify descriptor that had watches waits for the
// kernel's SRCU grace period (6-16 ms), which a short command would pay at its exit.
constexpr Millis hold_check_every{50};
constexpr Millis watch_held_after{500};
// --limit N waits with a thread per slot in the helper: more would be a thread army.
constexpr int most_slots = 1024;

// What an errno of util/files.hpp means for a file of the store.
std::string reason(int err)
{
  switch (err) {
  case EINVAL:
    return "it is not a regular file (remove it)";
  case EMLINK:
    return "it has other hard links (remove it)";
  case ELOOP:
    return "it is a symbolic link (remove it)";
  default:
    return std::strerror(err);
  }
}

// An I/O failure on the store's files as one line with the contract's exit code: no right
// to the directory is 77, a path that cannot be a lock directory or a file that cannot be a
// lock file 78, the rest 69.
Error io_error(int err, std::string_view what, const std::string& path)
{
  ExitCode code = ExitCode::unavailable;
  if (err == EACCES || err == EPERM) {
    code = ExitCode::auth;
  } else if (err == EROFS || err == ENOTDIR || err == ENOENT || err == ELOOP || err == ENAMETOOLONG
             || err == EISDIR || err == EINVAL || err == EMLINK) {
    code = ExitCode::config;
  }
  return Error(code, "file store: cannot {} {}: {}", what, path, reason(err));
}

int flock_retry(int fd, int op)
{
  int rc = 0;
  while ((rc = ::flock(fd, op)) < 0 && errno == EINTR) {
  }
  return rc;
}

bool same_file(const struct stat& a, const struct stat& b)
{
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Whether name inside dir (not followed if a symlink) still names the file open on fd.
bool names(int dir, const std::string& name, int fd)
{
  struct stat by_name {};
  struct stat by_fd {};
  return dir >= 0 && fd >= 0 && ::fstat(fd, &by_fd) == 0
         && ::fstatat(dir, name.c_str(), &by_name, AT_SYMLINK_NOFOLLOW) == 0
         && same_file(by_fd, by_name);
}

// The largest record or counter read: a file another user fills is not read whole.
constexpr std::size_t longest_file = 65536;

std::string read_path(const std::string& path)
{
  util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  return fd ? util::read_bounded(fd.get(), longest_file).value_or("") : std::string();
}

// Compatible kinds share a key: exclusive with shared, a semaphore with the same N only.
bool compatible(const lock::LockKind& a, const lock::LockKind& b)
{
  bool a_limit = a.mode == lock::LockKind::Mode::limit;
  bool b_limit = b.mode == lock::LockKind::Mode::limit;
  return a_limit == b_limit && (!a_limit || a.limit == b.limit);
}

// Whether the latch open on fd is dlock's and expired.
bool latch_expired(int fd);

// The holder record open on fd, if it is one dlock wrote: at most max_holder_record_bytes, and
// its file owned by root or by the user it names (a record planted by another user of a shared
// directory cannot pass for root's leader, or anyone else's).
std::optional<Record> read_record(int fd)
{
  std::optional<std::string> text = util::read_bounded(fd, lock::max_holder_record_bytes);
  std::optional<Record> r = text ? Record::parse(*text) : std::nullopt;
  struct stat st {};
  if (!r || ::fstat(fd, &st) != 0) {
    return std::nullopt;
  }
  if (st.st_uid != 0) {
    // (A user name unknown here, or a bare uid, is taken as it is: it impersonates no one.)
    const passwd* named = ::getpwnam(r->user.c_str());
    if (named != nullptr && named->pw_uid != st.st_uid) {
      util::log_verbose("file store: ignoring a holder record of uid {} that names user {}",
                        st.st_uid, util::printable(r->user));
      return std::nullopt;
    }
  }
  return r;
}

// The live records of .dlock (each still locked by its holder), by encoded name; the records
// of holders gone, and latches expired, are removed on the way. Another user's FIFO or link
// there is skipped.
std::map<std::string, std::vector<Record>> live_records(int meta, const std::string& only = {})
{
  std::map<std::string, std::vector<Record>> found;
  if (meta < 0) {
    return found;
  }
  for (const std::string& entry : util::directory_entries(meta)) {
    std::size_t plus = entry.find('+');
    if (plus == std::string::npos || (!only.empty() && entry.substr(0, plus) != only)) {
      continue;
    }
    std::string_view what = std::string_view(entry).substr(plus);
    if (what == "+latch") {
      util::UniqueFd fd = util::open_regular_at(meta, entry, O_RDONLY);
      if (fd && latch_expired(fd.get()) && names(meta, entry, fd.get())) {
        ::unlinkat(meta, entry.c_str(), 0); // nothing is left past its expiry
      }
      continue;
    }
    bool final = what.starts_with("+by+");
    if (!final && !what.starts_with("+new+")) {
      continue;
    }
    util::UniqueFd fd = util::open_regular_at(meta, entry, O_RDONLY);
    if (!fd) {
      continue;
    }
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
      if (names(meta, entry, fd.get())) {
        // its holder is gone (a record is locked before it is named)
        ::unlinkat(meta, entry.c_str(), 0);
      }
      continue;
    }
    if (!final) {
      continue;
    }
    if (std::optional<Record> r = read_record(fd.get())) {
      r->fingerprint = entry.substr(plus + 4);
      found[entry.substr(0, plus)].push_back(std::move(*r));
    }
  }
  for (auto& [encoded, records] : found) {
    std::sort(records.begin(), records.end(),
              [](const Record& a, const Record& b) { return a.acquired_ms < b.acquired_ms; });
  }
  return found;
}

// The record name inside .dlock if its holder still holds it (its lock on the record is held).
std::optional<Record> live_record(int meta, const std::string& name)
{
  util::UniqueFd fd = meta >= 0 ? util::open_regular_at(meta, name, O_RDONLY) : util::UniqueFd();
  if (!fd || ::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
    return std::nullopt;
  }
  return read_record(fd.get());
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
    holder.user =
      entry != nullptr && entry->pw_name != nullptr ? entry->pw_name : std::to_string(st.st_uid);
  }
  // Its program name only, as dlock records its own holders (the arguments may be secrets).
  std::string command = read_path(proc + "/cmdline");
  std::vector<std::string> argv;
  for (std::size_t start = 0; start < command.size();) {
    std::size_t end = std::min(command.find('\0', start), command.size());
    argv.push_back(command.substr(start, end - start));
    start = end + 1;
  }
  holder.command = lock::recorded_command(argv, false);
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
  holder.note = r.note;
  holder.value = r.value;
  return holder;
}

// A side file of .dlock (another user may have planted anything there): its text if it is a
// regular file of at most max_side_file_bytes, else nullopt (ENOENT: there is none).
std::optional<std::string> read_side(int meta, const std::string& name)
{
  if (meta < 0) {
    errno = ENOENT;
    return std::nullopt;
  }
  util::UniqueFd fd = util::open_regular_at(meta, name, O_RDONLY);
  return fd ? util::read_bounded(fd.get(), max_side_file_bytes) : std::nullopt;
}

// A --replace request in .dlock (name), if one is there that the holder may heed: written by
// the holder's own user or by root. Another local user may not stop this user's command, as
// kill(2) would not let it; its request is ignored, and it waits the holder out.
std::optional<Announcement> read_replace_request(int meta, const std::string& name)
{
  if (meta < 0) {
    return std::nullopt;
  }
  util::UniqueFd fd = util::open_regular_at(meta, name, O_RDONLY);
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) {
    return std::nullopt;
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    util::log_verbose("file store: ignoring a --replace request of uid {}: only uid {} or root "
                      "may ask this holder to stand down",
                      st.st_uid, ::geteuid());
    return std::nullopt;
  }
  std::optional<std::string> text = util::read_bounded(fd.get(), max_side_file_bytes);
  return text ? Announcement::parse(*text) : std::nullopt;
}

// One holder's policy side record, as found in .dlock.
struct FoundPolicy {
  std::string file; // ENC+policy+FP
  PolicyRecord p;
};

// The policy side record of holder fingerprint, with its ENC+ended+FP stamp if it has none.
std::optional<PolicyRecord> read_policy(int meta, const Layout& layout,
                                        const std::string& fingerprint)
{
  std::optional<std::string> text = read_side(meta, layout.policy_name(fingerprint));
  std::optional<PolicyRecord> p = text ? PolicyRecord::parse(*text) : std::nullopt;
  if (!p || p->fingerprint != fingerprint) {
    return std::nullopt;
  }
  if (p->ended_at_ms == 0) {
    std::optional<std::string> ended = read_side(meta, layout.ended_name(fingerprint));
    std::string_view digits = ended ? std::string_view(*ended) : std::string_view();
    if (digits.ends_with('\n')) {
      digits.remove_suffix(1);
    }
    p->ended_at_ms = lock::parse_record_number(digits).value_or(0);
  }
  return p;
}

// Every policy side record of layout; the names of those that are not dlock's in garbage.
std::vector<FoundPolicy> read_policies(int meta, const Layout& layout,
                                       std::vector<std::string>* garbage = nullptr)
{
  std::vector<FoundPolicy> found;
  const std::string prefix = layout.policy_prefix();
  for (const std::string& entry :
       meta >= 0 ? util::directory_entries(meta) : std::vector<std::string>{}) {
    if (!entry.starts_with(prefix)) {
      continue;
    }
    if (std::optional<PolicyRecord> p = read_policy(meta, layout, entry.substr(prefix.size()))) {
      found.push_back(FoundPolicy{entry, std::move(*p)});
    } else if (garbage != nullptr) {
      garbage->push_back(entry);
    }
  }
  return found;
}

// Notes that holder f's lease ended without a release, at now: in its record if this user may
// replace it, else in ENC+ended+FP, made once by the first to see it (O_EXCL).
void stamp_ended(int meta, const Layout& layout, FoundPolicy& f, std::int64_t now)
{
  f.p.ended_at_ms = now;
  if (util::replace_file_at(meta, f.file, f.p.serialize(), 0644) == 0) {
    return;
  }
  const std::string name = layout.ended_name(f.p.fingerprint);
  const std::string text = fmt::format("{}\n", now);
  util::UniqueFd fd = util::open_regular_at(meta, name, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    util::log_warning("file store: cannot note when the lease of {} ended in {}: {}",
                      holder_of(f.p.holder).identity(), layout.meta_path_of(name),
                      std::strerror(errno));
  }
}

// Replaces a side file of .dlock atomically (a new file renamed over it: whatever was planted
// there is not followed); false, logged, if it cannot be written.
bool write_side(int meta, const Layout& layout, const std::string& name, const std::string& text)
{
  int err = meta >= 0 ? util::replace_file_at(meta, name, text, 0644) : ENOENT;
  if (err != 0) {
    util::log_warning("file store: cannot write {}: {}", layout.meta_path_of(name),
                      std::strerror(err));
  }
  return err == 0;
}

// The record of a holder or waiter that request describes, for a side file.
Record record_of(const std::string& name, const lock::AcquireRequest& request)
{
  Record r;
  r.name = name;
  r.kind = request.kind;
  r.user = request.holder.user;
  r.host = request.holder.host;
  r.pid = request.holder.pid;
  r.acquired_ms = util::unix_ms();
  r.ttl_ms = request.ttl.count();
  r.command = request.holder.command;
  r.note = request.holder.note;
  r.value = request.holder.value;
  return r;
}

// The newest --supersede waiter of layout that still waits or holds (its flock is kept); the
// announcements of waiters gone are removed on the way.
std::optional<Announcement> live_newest(int meta, const Layout& layout)
{
  std::optional<Announcement> newest;
  const std::string prefix = layout.waiter_prefix();
  for (const std::string& entry :
       meta >= 0 ? util::directory_entries(meta) : std::vector<std::string>{}) {
    if (!entry.starts_with(prefix)) {
      continue;
    }
    util::UniqueFd fd = util::open_regular_at(meta, entry, O_RDONLY);
    if (!fd) {
      continue;
    }
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
      if (names(meta, entry, fd.get())) {
        ::unlinkat(meta, entry.c_str(), 0); // its waiter is gone
      }
      continue;
    }
    std::optional<std::string> text = util::read_bounded(fd.get(), max_side_file_bytes);
    std::optional<Announcement> a = text ? Announcement::parse(*text) : std::nullopt;
    if (a && entry.substr(prefix.size()) == a->id
        && (!newest || std::tie(a->at_us, a->id) > std::tie(newest->at_us, newest->id))) {
      newest = std::move(a);
    }
  }
  return newest;
}

// How many --fair waiters of layout are queued (their tickets still locked by them).
std::int64_t queued_waiters(int meta, const Layout& layout,
                            const std::vector<std::string>& meta_entries)
{
  std::int64_t queued = 0;
  const std::string prefix = layout.ticket_prefix();
  for (const std::string& entry : meta_entries) {
    if (!entry.starts_with(prefix)) {
      continue;
    }
    util::UniqueFd fd = util::open_regular_at(meta, entry, O_RDONLY);
    if (fd && ::flock(fd.get(), LOCK_SH | LOCK_NB) != 0) {
      ++queued;
    }
  }
  return queued;
}

// A --min-hold or --lock-delay left by a holder no longer running, added to status: held
// (command ended) until its min-hold, else not takeable for its delay.
void add_policy(int meta, const Layout& layout, const std::vector<Record>& records,
                lock::LockStatus& status)
{
  if (status.held) {
    return;
  }
  std::int64_t now = util::unix_ms();
  for (const FoundPolicy& f : read_policies(meta, layout)) {
    const PolicyRecord& p = f.p;
    if (std::any_of(records.begin(), records.end(),
                    [&](const Record& r) { return r.fingerprint == p.fingerprint; })) {
      continue;
    }
    if (p.hold_until_ms > now && p.hold_until_ms - now > status.ttl_ms) {
      status.held = true;
      status.command_ended = true;
      status.ttl_ms = p.hold_until_ms - now;
      status.delay_ms = 0;
      status.holder = holder_of(p.holder);
    } else if (std::int64_t free = p.free_at(now); !status.held && free - now > status.delay_ms) {
      status.delay_ms = free - now;
      status.holder = holder_of(p.holder);
    }
  }
}

// The digits a fencing counter starts with (0 for none).
std::int64_t parse_fence(std::string_view text)
{
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9' || value > (INT64_MAX - 9) / 10) {
      break;
    }
    value = value * 10 + (c - '0');
  }
  return value;
}

std::int64_t read_fence(int meta, const Layout& layout)
{
  util::UniqueFd fd =
    meta >= 0 ? util::open_regular_at(meta, layout.fence_name(), O_RDONLY) : util::UniqueFd();
  return fd ? parse_fence(util::read_bounded(fd.get(), 64).value_or("")) : 0;
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
    if (entry == layout.encoded || entry.starts_with(slot_prefix)
        || entry == layout.turnstile_name()) {
      files.push_back(entry);
    }
  }
  return files;
}

Observed observe(int dir, const Layout& layout, const std::vector<std::string>& files,
                 const std::vector<ProcLock>& locks, const std::vector<Record>& records)
{
  Observed seen;
  std::vector<const ProcLock*> granted;
  bool on_slots = false;
  int slot_files = 0;
  for (const std::string& file : files) {
    // The turnstile's holder waits for the lock, as do those blocked on it.
    bool turnstile = file == layout.turnstile_name();
    bool slot = !turnstile && file.size() > layout.lock_name().size();
    slot_files += slot ? 1 : 0;
    struct stat st {};
    if (::fstatat(dir, file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    for (const ProcLock& l : locks) {
      if (l.inode != st.st_ino || l.dev_major != major(st.st_dev)
          || l.dev_minor != minor(st.st_dev)) {
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

// The kernel's own text (every flock of the machine): read whole up to a larger cap.
std::vector<ProcLock> proc_locks()
{
  util::UniqueFd fd(::open("/proc/locks", O_RDONLY | O_CLOEXEC | O_NOCTTY));
  return parse_proc_locks(fd ? util::read_bounded(fd.get(), 64 << 20).value_or("") : "");
}

// The flocks granted on the lock and slot files of layout (not the turnstile), each as
// "inode:pid" (the pid that took it): who holds it in the kernel's words.
std::set<std::string> granted_flocks(int dir, const Layout& layout,
                                     const std::vector<std::string>& files,
                                     const std::vector<ProcLock>& locks)
{
  std::set<std::string> holders;
  for (const std::string& file : files) {
    struct stat st {};
    if (file == layout.turnstile_name()
        || ::fstatat(dir, file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;
    }
    for (const ProcLock& l : locks) {
      if (!l.blocked && l.inode == st.st_ino && l.dev_major == major(st.st_dev)
          && l.dev_minor == minor(st.st_dev)) {
        holders.insert(fmt::format("{}:{}", l.inode, l.pid));
      }
    }
  }
  return holders;
}

// A leader's term where no fencing token names it: a number from 1 to 2^60 that text names.
std::int64_t term_of(std::string_view text)
{
  const std::string hex = util::sha256_hex(text).substr(0, 15);
  std::int64_t term = 0;
  std::from_chars(hex.data(), hex.data() + hex.size(), term, 16);
  return std::max<std::int64_t>(term, 1);
}

// A dlock holder's term: its fencing token, or (no counter) a number its process names, the
// same in its record and in its --min-hold's side record.
std::int64_t term_of(const lock::HolderInfo& holder)
{
  return holder.fence > 0
           ? holder.fence
           : term_of(fmt::format("dlock\t{}\t{}\t{}", holder.host, holder.user, holder.pid));
}

lock::LockStatus status_of(int meta, const Layout& layout, std::string name, const Observed& seen)
{
  lock::LockStatus status;
  status.name = std::move(name);
  status.ttl_ms = -1; // no expiry: the lock lives as long as its process
  status.server_time_ms = util::unix_ms();
  status.last_fence = read_fence(meta, layout);
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

// One look at a lock: its live records, its files, the flocks on them, and the status they make
// (with the side record's policy); what status and the watch and leader gates each read.
struct Look {
  std::vector<Record> records;
  std::vector<std::string> files;
  std::vector<ProcLock> locks;
  Observed seen;
  lock::LockStatus status;
};

Look look_at(int dir, int meta, const Layout& layout, const std::string& name)
{
  Look look;
  look.records = live_records(meta, layout.encoded)[layout.encoded];
  look.files = files_of(layout, util::directory_entries(dir));
  look.locks = proc_locks();
  look.seen = observe(dir, layout, look.files, look.locks, look.records);
  look.status = status_of(meta, layout, name, look.seen);
  add_policy(meta, layout, look.records, look.status);
  return look;
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

void* helper_thread(void* arg) { helper_wait(*static_cast<HelperThread*>(arg)); }

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
    drop_ticket(n);
  }
  for (auto& [name, g] : m_gates) {
    drop_party(g);
  }
}

FileStore::Named* FileStore::find(const lock::LockName& name)
{
  auto found = m_named.find(name.str());
  return found == m_named.end() ? nullptr : &found->second;
}

bool FileStore::open_directories(bool create)
{
  if (m_dirfd) {
    return true;
  }
  const std::string shown = m_dir.empty() ? "/" : m_dir;
  // mkdir -p: each missing component with 0777 less the umask. The path is the caller's, so
  // its symlinks are followed (the kernel's protected_symlinks keeps another user's symlink
  // in a sticky directory from being followed).
  struct stat existing {};
  bool exists = ::stat(shown.c_str(), &existing) == 0 && S_ISDIR(existing.st_mode);
  for (std::size_t slash = 1; create && !exists && slash <= m_dir.size(); ++slash) {
    if (slash != m_dir.size() && m_dir[slash] != '/') {
      continue;
    }
    std::string part = m_dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      throw io_error(errno, "create the lock directory", part);
    }
  }
  // A symlink as the directory itself is followed only if root or the caller made it (as the
  // kernel's protected_symlinks does in a sticky directory, where it may be off).
  struct stat link {};
  if (::lstat(shown.c_str(), &link) == 0 && S_ISLNK(link.st_mode) && link.st_uid != 0
      && link.st_uid != ::getuid()) {
    throw Error(ExitCode::config,
                "file store: refusing the lock directory {}: it is a symbolic link "
                "another user made (uid {})",
                shown, link.st_uid);
  }
  util::UniqueFd dir = util::open_directory(shown);
  if (!dir && !create && errno == ENOENT) {
    return false;
  }
  struct stat st {};
  if (!dir || ::fstat(dir.get(), &st) != 0) {
    throw io_error(errno, "use the lock directory", shown);
  }
  // Whoever may replace the lock files may take a lock from its holder.
  if (std::optional<std::string> why = util::untrusted_because(st, true)) {
    throw Error(ExitCode::config,
                "file store: refusing the lock directory {}: {}; it must belong to root or to you, "
                "and be sticky (chmod +t) if every user may write it",
                shown, *why);
  }
  if (::faccessat(dir.get(), ".", W_OK | X_OK, AT_EACCESS) != 0) {
    // Locking an existing file needs only read access; creating one needs the directory.
    util::log_verbose("file store: {} is not writable ({}); only lock files that exist can be "
                      "taken",
                      shown, std::strerror(errno));
  }
  const std::string meta_path = Layout(m_dir, "").meta_dir();
  util::UniqueFd meta = util::open_directory_at(dir.get(), Layout::meta_name);
  if (!meta && errno == ENOENT && create) {
    // Every user who may write the directory may keep records and counters in .dlock, which
    // is sticky then, as /run/lock is: none can remove or replace another's.
    mode_t mode = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 ? (st.st_mode & 0777) | S_ISVTX : 0755;
    if (::mkdirat(dir.get(), Layout::meta_name, 0700) == 0 || errno == EEXIST) {
      meta = util::open_directory_at(dir.get(), Layout::meta_name);
      struct stat made {};
      if (meta && ::fstat(meta.get(), &made) == 0 && made.st_uid == ::geteuid()
          && (made.st_mode & 07777) == 0700) {
        ::fchmod(meta.get(), mode);
      }
    } else {
      errno = errno == EEXIST ? ENOENT : errno;
    }
  }
  if (!meta && (errno == ELOOP || errno == ENOTDIR)) {
    throw Error(ExitCode::config, "file store: refusing {}: {}", meta_path,
                errno == ELOOP ? "it is a symbolic link (remove it)"
                               : "it is not a directory (remove it)");
  }
  if (meta) {
    struct stat ms {};
    if (::fstat(meta.get(), &ms) != 0) {
      throw io_error(errno, "use", meta_path);
    }
    // Its owner could remove or replace the records and the fencing counters in it.
    if (std::optional<std::string> why = util::untrusted_because(ms, true)) {
      throw Error(ExitCode::config, "file store: refusing {}: {} (remove it: dlock makes it again)",
                  meta_path, *why);
    }
  } else {
    m_records = false;
    m_fencing = false;
    util::log_verbose("file store: no holder records and no fencing tokens: cannot {} {}: {}",
                      create ? "create" : "open", meta_path, std::strerror(errno));
  }
  m_dirfd = std::move(dir);
  m_metafd = std::move(meta);
  return true;
}

util::UniqueFd FileStore::open_lock_file(const Layout& layout, const std::string& name)
{
  // Read-only, as flock(1) opens it: whoever may read a lock file may lock it. One that
  // exists is opened as it is, whoever made it (its owner can flock it, or remove it, anyway:
  // man dlock, FILE STORE). The command gets the held one through inherited_descriptors(),
  // so the kernel frees the lock only once the command is gone too.
  util::UniqueFd fd = util::open_or_create_regular_at(m_dirfd.get(), name, O_RDONLY, 0644, true);
  if (!fd) {
    throw io_error(errno, "open the lock file", layout.path_of(name));
  }
  return fd;
}

void FileStore::open_turnstile(Named& n)
{
  try {
    n.turnstile = open_lock_file(n.layout, n.layout.turnstile_name());
  } catch (const Error& error) {
    // A lock file that exists can be locked in a directory dlock may not write.
    util::log_verbose("{} (a waiting exclusive holder does not hold back --shared ones)",
                      error.what());
  }
}

void FileStore::open_candidates(Named& n)
{
  if (!n.candidates.empty()) {
    return;
  }
  std::vector<std::string> names;
  if (n.kind.mode == lock::LockKind::Mode::limit) {
    for (int slot = 0; slot < n.kind.limit; ++slot) {
      names.push_back(n.layout.slot_name(slot));
    }
  } else {
    names.push_back(n.layout.lock_name());
    if (n.kind.mode == lock::LockKind::Mode::shared) {
      open_turnstile(n);
    }
  }
  for (const std::string& name : names) {
    try {
      n.candidates.push_back(open_lock_file(n.layout, name));
    } catch (const Error&) {
      drop_candidates(n);
      throw;
    }
    n.candidate_names.push_back(name);
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
        throw io_error(err, "lock", n.layout.path_of(n.candidate_names[i]));
      }
    }
    if (shared) {
      flock_retry(n.turnstile.get(), LOCK_UN);
    }
    if (locked < 0) {
      return false;
    }
    // The file may have been removed or replaced after it was opened (release --force): the
    // lock is then on a file no one else will open. Start again from the path.
    if (names(m_dirfd.get(), n.candidate_names[static_cast<std::size_t>(locked)],
              n.candidates[static_cast<std::size_t>(locked)].get())) {
      // Locked, nothing run yet: a holder gone may still keep it closed (take, check, give back).
      if (closed_by_policy(n, request)) {
        drop_candidates(n);
        return false;
      }
      if (take(n, locked, request)) {
        try {
          arm_policy(n, request);
        } catch (const Error&) {
          drop_hold(n); // a --min-hold or --lock-delay that cannot be kept is not taken
          throw;
        }
        return true;
      }
    }
    drop_candidates(n);
  }
  throw Error(ExitCode::unavailable, "file store: the lock files of '{}' keep being replaced",
              n.layout.encoded);
}

bool FileStore::take(Named& n, int i, const lock::AcquireRequest& request)
{
  stop_helper(n);
  auto index = static_cast<std::size_t>(i);
  n.lock = std::move(n.candidates[index]);
  n.file = n.candidate_names[index];
  n.path = n.layout.path_of(n.file);
  n.slot = n.kind.mode == lock::LockKind::Mode::limit ? i : -1;
  drop_candidates(n); // the other slots: unlocked in case a helper thread took one too
  n.held = true;
  n.loss_reported = false;
  n.replace_told = false;
  n.watched = false;
  n.fence = m_fencing ? next_fence(n.layout) : 0;
  struct stat st {};
  ::fstat(n.lock.get(), &st);
  if (m_records) {
    write_record(n, request, st.st_ino);
  }
  // Checked once the fence and the record are written: a removal (release --force) before
  // now is seen here, so no second holder can start unseen; one after, by the checks that
  // follow (check_hold, then inotify).
  if (!still_ours(n)) {
    drop_hold(n);
    return false;
  }
  n.taken_at = util::monotonic_now();
  n.next_check = n.taken_at + hold_check_every;
  return true;
}

bool FileStore::watch_hold(Named& n)
{
  if (!m_inotify) {
    m_inotify.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  }
  if (!m_inotify) {
    return false;
  }
  // The inodes held, through their descriptors: no path is resolved again.
  constexpr std::uint32_t gone = IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF;
  auto watch = [&](int fd) {
    std::string self = "/proc/self/fd/" + std::to_string(fd);
    return ::inotify_add_watch(m_inotify.get(), self.c_str(), gone);
  };
  n.watch_lock = watch(n.lock.get());
  n.watch_record = n.record ? watch(n.record.get()) : -1;
  watch_meta(); // a --replace acquirer's request
  return n.watch_lock >= 0 && (!n.record || n.watch_record >= 0)
         && (!m_metafd || m_watch_meta >= 0);
}

void FileStore::check_hold(Named& n, bool replace_changed)
{
  if (!n.held) {
    return;
  }
  const std::string replace = n.layout.replace_name(token_fingerprint(n.token));
  if (replace_changed && !n.replace_told) {
    if (std::optional<Announcement> asked = read_replace_request(m_metafd.get(), replace)) {
      // The holder renews at once, and its renewal answers replaced_by.
      n.replace_told = true;
      m_answers.answer(
        Outcome{.op = Op::disconnected, .lease_ended = true, .replaced_by = holder_of(asked->who)});
    }
  }
  if (!n.loss_reported && !still_ours(n)) {
    n.loss_reported = true;
    Outcome lost{
      .op = Op::disconnected,
      .error = Error(ExitCode::lost, "the lock file {} was removed or replaced", n.path),
      .lease_ended = true, // the holder confirms at once, and finds it lost
    };
    m_answers.answer(std::move(lost));
  }
}

std::int64_t FileStore::next_fence(const Layout& layout)
{
  const int meta = m_metafd.get();
  const std::string name = layout.fence_name();
  const std::string path = layout.fence_path();
  auto give_up = [&](int err) {
    m_fencing = false;
    util::log_verbose("file store: no fencing token: cannot update {}: {}", path, reason(err));
    return std::int64_t{0};
  };
  // The counter is trusted only if no one else can change or lock it: the caller's own file,
  // mode 0600, one link. Any other (another user's, an older dlock's 0666 one, a FIFO) is
  // removed, and the counter starts again from the clock, above every token it has issued.
  util::UniqueFd fd;
  bool created = false;
  for (int attempt = 0; !fd && attempt < 3; ++attempt) {
    bool existed = ::faccessat(meta, name.c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0;
    fd = util::open_or_create_regular_at(meta, name, O_RDWR, 0600, true);
    struct stat st {};
    if (fd && ::fstat(fd.get(), &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0) {
      created = !existed;
      break;
    }
    if (!fd && errno != EINVAL && errno != ELOOP && errno != EMLINK) {
      return give_up(errno);
    }
    fd.reset();
    if (::unlinkat(meta, name.c_str(), 0) != 0 && errno != ENOENT) {
      return give_up(errno);
    }
  }
  if (!fd) {
    return give_up(EAGAIN);
  }
  // Blocking, on a file only this user and root can open: holders of --shared and --limit
  // locks update it at once.
  if (flock_retry(fd.get(), LOCK_EX) != 0) {
    return give_up(errno);
  }
  std::int64_t last = parse_fence(util::read_bounded(fd.get(), 64).value_or(""));
  // A missing counter starts above any token it can have issued: from the clock in µs.
  std::int64_t next = last > 0 ? last + 1 : std::max<std::int64_t>(1, util::unix_us());
  std::string text = fmt::format("{:020}\n", next); // one width: rewritten in place
  bool ok = ::pwrite(fd.get(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size())
            && ::fdatasync(fd.get()) == 0;
  if (ok && created) {
    ok = ::fsync(meta) == 0;
  }
  int err = errno;
  flock_retry(fd.get(), LOCK_UN);
  if (!ok) {
    return give_up(err);
  }
  return next;
}

void FileStore::write_record(Named& n, const lock::AcquireRequest& request, std::uint64_t inode)
{
  std::string fingerprint = token_fingerprint(request.token);
  std::string fresh = n.layout.new_record_name(fingerprint);
  std::string final_name = n.layout.record_name(fingerprint);
  // Created 0600 and locked before anyone else may open it, and locked before it is named
  // +by+, so that a record without a lock is always a dead one.
  util::UniqueFd fd =
    util::open_regular_at(m_metafd.get(), fresh, O_RDWR | O_CREAT | O_EXCL | O_TRUNC, 0600, true);
  Record r;
  r.name = n.name;
  r.kind = n.kind;
  r.slot = n.slot;
  r.inode = inode;
  r.user = request.holder.user;
  r.host = request.holder.host;
  r.pid = request.holder.pid;
  r.acquired_ms = util::unix_ms();
  r.fence = n.fence;
  r.ttl_ms = request.ttl.count();
  r.command = request.holder.command;
  r.note = request.holder.note;
  // A candidate's value: the record's rename into place is what wakes leader watchers (inotify
  // on .dlock), so taking the lock as a candidate costs nothing more than as dlock run.
  r.value = request.holder.value;
  std::string line = r.serialize();
  if (!fd || flock_retry(fd.get(), LOCK_EX | LOCK_NB) != 0
      || ::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())
      || ::fchmod(fd.get(), 0644) != 0
      || ::renameat(m_metafd.get(), fresh.c_str(), m_metafd.get(), final_name.c_str()) != 0) {
    m_records = false;
    util::log_verbose(
      "file store: no holder record (status shows the pid only): cannot write {}: {}",
      n.layout.record_path(fingerprint), std::strerror(errno));
    if (fd) {
      ::unlinkat(m_metafd.get(), fresh.c_str(), 0);
    }
    return;
  }
  n.record = std::move(fd);
  n.record_file = final_name;
}

void FileStore::start_acquire(const lock::LockName& name, const lock::AcquireRequest& request)
{
  auto [it, inserted] = m_named.try_emplace(name.str(), Layout(m_dir, name.str()));
  Named& n = it->second;
  n.name = name.str();
  if (n.held && n.token == request.token) {
    // Asked again for a lock held (a retry after a lost answer): it is ours.
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.acquired = true;
    outcome.acquire.fence = n.fence;
    m_answers.answer(std::move(outcome));
    return;
  }
  if (request.kind.mode == lock::LockKind::Mode::limit && request.kind.limit > most_slots) {
    m_answers.answer(Op::acquire, Error(ExitCode::usage,
                                        "--limit {}: the file store has a slot file per holder "
                                        "and takes --limit {} at most",
                                        request.kind.limit, most_slots));
    return;
  }
  if (n.kind != request.kind) {
    drop_candidates(n);
  }
  n.kind = request.kind;
  n.token = request.token;
  n.closed_until_ms = 0;
  n.supersede = request.policy.supersede;
  n.side_changed = false;
  Outcome outcome{.op = Op::acquire};
  lock::AcquireResult& result = outcome.acquire;
  try {
    prepare_directory();
    std::vector<Record> records = live_records(m_metafd.get(), n.layout.encoded)[n.layout.encoded];
    for (const Record& r : records) {
      if (!compatible(r.kind, request.kind)) {
        drop_candidates(n);
        result.kind_in_use = r.kind;
        m_answers.answer(std::move(outcome));
        return;
      }
    }
    if (request.ticket.mode == lock::WaitMode::fair && !n.ticket) {
      make_ticket(n, request);
    }
    // Every dlock lets earlier --fair waiters go first (flock(1) cannot know of them). Once a
    // ticket is ahead, the queue is watched and read again: a change after that read wakes the
    // wait. (None ahead: the first in line waits in flock(2), and a ticket made later is
    // behind it.)
    n.queued = queue_ahead(n);
    if (n.queued && m_watch_meta < 0) {
      watch_meta();
      n.queued = queue_ahead(n);
    }
    if (n.queued) {
      drop_candidates(n); // no helper blocks in flock(2) out of turn
    } else if (try_candidates(n, request)) {
      drop_ticket(n); // served: the next in the queue is woken
      result.acquired = true;
      result.fence = n.fence;
      m_answers.answer(std::move(outcome));
      return;
    }
    Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
    result.block = std::min(cap, longest_block);
    if (n.queued && n.close_seen) {
      // Woken by a ticket's close whose flock the kernel had not freed yet: one more look soon.
      result.block = std::min(result.block, after_close);
    }
    n.close_seen = false;
    if (n.queued) {
      std::vector<std::string> files = files_of(n.layout, util::directory_entries(m_dirfd.get()));
      Observed seen = observe(m_dirfd.get(), n.layout, files, proc_locks(), records);
      result.lease =
        seen.held ? lock::AcquireResult::Lease::no_expiry : lock::AcquireResult::Lease::fair_queue;
      if (!seen.holders.empty()) {
        result.holder = seen.holders.front();
      }
      result.holders = static_cast<std::int64_t>(seen.holders.size());
    } else if (n.closed_until_ms > 0) {
      // Free in the kernel, closed by a holder gone: a timed block to its end.
      result.lease = n.closed_lease;
      result.holder_ttl = Millis(std::max<std::int64_t>(1, n.closed_until_ms - util::unix_ms()));
      result.holder = n.closed_holder;
      result.holders = 1;
      result.block = std::min(result.block, result.holder_ttl);
    } else {
      std::vector<std::string> files = files_of(n.layout, util::directory_entries(m_dirfd.get()));
      Observed seen = observe(m_dirfd.get(), n.layout, files, proc_locks(), records);
      using Lease = lock::AcquireResult::Lease;
      bool writer_first = n.writer_waiting && seen.holders.empty();
      result.lease = writer_first ? Lease::writer_first : Lease::no_expiry;
      if (!seen.holders.empty()) {
        result.holder = seen.holders.front();
      }
      result.holders = static_cast<std::int64_t>(seen.holders.size());
    }
    if (request.ticket.mode == lock::WaitMode::once) {
      drop_candidates(n);
      drop_ticket(n);
    }
    if (!ask_others(n, request, records, result)) {
      drop_candidates(n);
      drop_newest(n);
    }
    m_answers.answer(std::move(outcome));
  } catch (const Error& error) {
    if (!n.held) {
      drop_candidates(n);
      drop_ticket(n);
    }
    m_answers.answer(Op::acquire, error);
  }
}

bool FileStore::closed_by_policy(Named& n, const lock::AcquireRequest& request)
{
  n.closed_until_ms = 0;
  if (!m_metafd || n.kind.mode == lock::LockKind::Mode::limit) {
    return false;
  }
  // Watched before they are read, once one keeps it closed (read again): a change after the
  // read wakes the wait that follows.
  bool closed = closed_by_policies(n, request);
  if (closed && m_watch_meta < 0) {
    watch_meta();
    closed = closed_by_policies(n, request);
  }
  return closed;
}

bool FileStore::closed_by_policies(Named& n, const lock::AcquireRequest& request)
{
  n.closed_until_ms = 0;
  const int meta = m_metafd.get();
  std::vector<std::string> garbage;
  std::vector<FoundPolicy> found = read_policies(meta, n.layout, &garbage);
  for (const std::string& name : garbage) {
    // Not dlock's (planted, oversized, malformed, not a regular file): ignored, removed if it can.
    util::log_verbose("file store: ignoring {}: not a dlock side record",
                      n.layout.meta_path_of(name));
    ::unlinkat(meta, name.c_str(), 0);
  }
  const std::string mine = token_fingerprint(request.token);
  const std::int64_t now = util::unix_ms();
  for (FoundPolicy& f : found) {
    const std::string fingerprint = f.p.fingerprint;
    // Its holder was asked to stand down: the take-over keeps no min-hold and no delay, even if
    // the holder ended before it could release. This token's own is from a hold of its before.
    bool over =
      fingerprint == mine || read_replace_request(meta, n.layout.replace_name(fingerprint));
    if (!over && f.p.delay_ms > 0 && f.p.ended_at_ms == 0) {
      // The lock file is ours: that lease ended without a release, by now at the latest.
      stamp_ended(meta, n.layout, f, now);
    }
    std::int64_t free = over ? 0 : f.p.free_at(now);
    if (free <= now) {
      ::unlinkat(meta, f.file.c_str(), 0); // over: nothing left behind
      ::unlinkat(meta, n.layout.ended_name(fingerprint).c_str(), 0);
    } else if (free > n.closed_until_ms) {
      n.closed_until_ms = free;
      n.closed_lease = f.p.hold_until_ms >= free ? lock::AcquireResult::Lease::min_hold
                                                 : lock::AcquireResult::Lease::lock_delay;
      n.closed_holder = holder_of(f.p.holder);
    }
  }
  return n.closed_until_ms > 0;
}

void FileStore::arm_policy(Named& n, const lock::AcquireRequest& request)
{
  // A request to stand down is for the holder it names, who is gone.
  const std::string replace_prefix = n.layout.encoded + "+replace+";
  for (const std::string& entry :
       m_metafd ? util::directory_entries(m_metafd.get()) : std::vector<std::string>{}) {
    if (entry.starts_with(replace_prefix)) {
      ::unlinkat(m_metafd.get(), entry.c_str(), 0);
    }
  }
  const lock::LockPolicy& policy = request.policy;
  if (policy.min_hold <= Millis(0) && policy.lock_delay <= Millis(0)) {
    return;
  }
  PolicyRecord p;
  p.fingerprint = token_fingerprint(request.token);
  p.holder = record_of(n.name, request);
  p.holder.fence = n.fence;
  p.hold_until_ms =
    policy.min_hold > Millis(0) ? p.holder.acquired_ms + policy.min_hold.count() : 0;
  p.delay_ms = policy.lock_delay.count();
  const std::string name = n.layout.policy_name(p.fingerprint);
  int err = m_metafd ? util::replace_file_at(m_metafd.get(), name, p.serialize(), 0644) : ENOENT;
  if (err != 0) {
    throw io_error(err, policy.min_hold > Millis(0) ? "keep --min-hold in" : "keep --lock-delay in",
                   n.layout.meta_path_of(name));
  }
}

Millis FileStore::settle_policy(const Layout& layout, const std::string& token)
{
  const std::string fingerprint = token_fingerprint(token);
  const std::string replace = layout.replace_name(fingerprint);
  bool replaced = read_replace_request(m_metafd.get(), replace).has_value();
  ::unlinkat(m_metafd.get(), replace.c_str(), 0);
  const std::string name = layout.policy_name(fingerprint);
  std::optional<PolicyRecord> p = read_policy(m_metafd.get(), layout, fingerprint);
  if (!p) {
    return Millis(0);
  }
  const std::int64_t now = util::unix_ms();
  if (!replaced && p->hold_until_ms > now) {
    // Kept for the min-hold, as a clean end: no lock-delay.
    p->command_ended = true;
    p->delay_ms = 0;
    p->ended_at_ms = 0;
    if (write_side(m_metafd.get(), layout, name, p->serialize())) {
      return Millis(p->hold_until_ms - now);
    }
  }
  ::unlinkat(m_metafd.get(), name.c_str(), 0);
  return Millis(0);
}

bool FileStore::ask_others(Named& n, const lock::AcquireRequest& request,
                           const std::vector<Record>& records, lock::AcquireResult& result)
{
  if (!m_metafd) {
    return true;
  }
  const std::string mine = token_fingerprint(request.token);
  // --replace: a running dlock holder of the lock alone is asked to stand down.
  if (request.policy.replace && n.closed_until_ms == 0 && records.size() == 1
      && records.front().kind.mode == lock::LockKind::Mode::exclusive
      && records.front().fingerprint.size() == 16 && records.front().fingerprint != mine) {
    Announcement ask{.id = mine, .who = record_of(n.name, request), .at_us = util::unix_us()};
    result.replace_asked =
      write_side(m_metafd.get(), n.layout, n.layout.replace_name(records.front().fingerprint),
                 ask.serialize());
  }
  const lock::WaitMode mode = request.ticket.mode;
  if (!request.policy.supersede || (mode != lock::WaitMode::wait && mode != lock::WaitMode::fair)) {
    return true;
  }
  watch_meta(); // before it is read or written: a newer one's announcement wakes the wait
  if (!request.ticket.registered) {
    announce_newest(n, request);
    return true;
  }
  std::optional<Announcement> newest = live_newest(m_metafd.get(), n.layout);
  if (newest && newest->id != token_fingerprint(request.ticket.waiter_id)) {
    result.superseded_by = holder_of(newest->who);
    return false;
  }
  return true;
}

void FileStore::announce_newest(Named& n, const lock::AcquireRequest& request)
{
  const int meta = m_metafd.get();
  const std::string temporary = n.layout.new_newest_name(util::random_token().substr(0, 16));
  // Created 0600, locked, then named: a newest that is not locked is a waiter gone.
  util::UniqueFd fd =
    util::open_regular_at(meta, temporary, O_RDWR | O_CREAT | O_EXCL | O_TRUNC, 0600, true);
  Announcement me{.id = token_fingerprint(request.ticket.waiter_id),
                  .who = record_of(n.name, request),
                  .at_us = util::unix_us()};
  const std::string final_name = n.layout.waiter_name(me.id);
  std::string text = me.serialize();
  if (!fd || flock_retry(fd.get(), LOCK_EX | LOCK_NB) != 0
      || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())
      || ::fchmod(fd.get(), 0644) != 0
      || ::renameat(meta, temporary.c_str(), meta, final_name.c_str()) != 0) {
    util::log_warning("file store: cannot write {}: {} (older --supersede waiters are not told)",
                      n.layout.meta_path_of(final_name), std::strerror(errno));
    if (fd) {
      ::unlinkat(meta, temporary.c_str(), 0);
    }
    return;
  }
  if (n.newest_file != final_name) {
    drop_newest(n);
  }
  n.newest = std::move(fd);
  n.newest_file = final_name;
}

void FileStore::drop_newest(Named& n) noexcept
{
  if (n.newest && ::getpid() == m_pid) {
    if (names(m_metafd.get(), n.newest_file, n.newest.get())) {
      ::unlinkat(m_metafd.get(), n.newest_file.c_str(), 0);
    }
  }
  n.newest.reset();
}

namespace {

// A ticket's place in the queue: its ctime (set by the kernel when it was named, and only ever
// forward by its owner), then its name.
using QueuePlace = std::tuple<std::int64_t, std::int64_t, std::string>;

QueuePlace place_of(const struct stat& st, const std::string& name)
{
  return {st.st_ctim.tv_sec, st.st_ctim.tv_nsec, name};
}

// A ticket left half made longer than this ago is a waiter's that died making it.
constexpr std::int64_t stale_new_ticket_s = 10;

} // namespace

void FileStore::make_ticket(Named& n, const lock::AcquireRequest& request)
{
  const int meta = m_metafd.get();
  if (meta < 0) {
    throw Error(ExitCode::unavailable,
                "file store: --fair needs {} for its queue, which cannot be opened",
                n.layout.meta_dir());
  }
  const std::string final_name = n.layout.ticket_name(token_fingerprint(request.ticket.waiter_id));
  std::string temporary;
  util::UniqueFd fd;
  int err = 0;
  // Readable by all (a waiter behind tests its flock), locked before it is named: a ticket
  // that is not locked is a waiter gone. Renamed once more if a waiter cleaning up removed it
  // before it was locked.
  for (int attempt = 0; attempt < 3; ++attempt) {
    temporary = n.layout.new_ticket_prefix() + util::random_token().substr(0, 16);
    fd = util::open_regular_at(meta, temporary, O_RDWR | O_CREAT | O_EXCL | O_TRUNC, 0644, true);
    if (!fd || flock_retry(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      err = errno;
      break;
    }
    if (::renameat(meta, temporary.c_str(), meta, final_name.c_str()) == 0) {
      n.ticket = std::move(fd);
      n.ticket_file = final_name;
      return;
    }
    err = errno;
    if (err != ENOENT) {
      break;
    }
  }
  if (fd) {
    ::unlinkat(meta, temporary.c_str(), 0);
  }
  throw io_error(err, "queue a --fair waiter in", n.layout.meta_path_of(final_name));
}

void FileStore::drop_ticket(Named& n) noexcept
{
  if (n.ticket && ::getpid() == m_pid && names(m_metafd.get(), n.ticket_file, n.ticket.get())) {
    ::unlinkat(m_metafd.get(), n.ticket_file.c_str(), 0); // wakes the waiter behind (inotify)
  }
  n.ticket.reset();
  n.ticket_file.clear();
  n.queued = false;
}

bool FileStore::queue_ahead(const Named& n)
{
  const int meta = m_metafd.get();
  if (meta < 0) {
    return false;
  }
  std::optional<QueuePlace> mine;
  struct stat own {};
  if (n.ticket && ::fstat(n.ticket.get(), &own) == 0) {
    mine = place_of(own, n.ticket_file);
  }
  const std::string prefix = n.layout.ticket_prefix();
  const std::string new_prefix = n.layout.new_ticket_prefix();
  const std::int64_t now_s = util::unix_ms() / 1000;
  bool ahead = false;
  for (const std::string& entry : util::directory_entries(meta)) {
    bool ticket = entry.starts_with(prefix);
    if ((!ticket && !entry.starts_with(new_prefix)) || entry == n.ticket_file) {
      continue;
    }
    // Another user's file may be anything: opened without following it, regular files only,
    // never read, and its flock tested without blocking.
    util::UniqueFd fd = util::open_regular_at(meta, entry, O_RDONLY);
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      continue;
    }
    if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
      // Its waiter is gone (a half-made one only once it is old: it is locked just after it
      // is made). Removed if this user may; one it may not stays, and counts for nothing.
      if ((ticket || now_s - st.st_ctim.tv_sec > stale_new_ticket_s)
          && names(meta, entry, fd.get())) {
        ::unlinkat(meta, entry.c_str(), 0);
      }
      continue;
    }
    if (ticket && (!mine || place_of(st, entry) < *mine)) {
      ahead = true;
    }
  }
  return ahead;
}

void FileStore::watch_meta()
{
  if (!m_inotify) {
    m_inotify.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  }
  if (m_watch_meta >= 0 || !m_inotify || !m_metafd) {
    return;
  }
  std::string self = "/proc/self/fd/" + std::to_string(m_metafd.get());
  m_watch_meta = ::inotify_add_watch(m_inotify.get(), self.c_str(),
                                     IN_MOVED_TO | IN_DELETE | IN_CLOSE_WRITE | IN_ONLYDIR);
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

void FileStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                                    Millis block)
{
  if (ticket.mode == lock::WaitMode::watch || ticket.mode == lock::WaitMode::barrier
      || ticket.mode == lock::WaitMode::latch || ticket.mode == lock::WaitMode::leader) {
    // Until inotify reports a change of the files the last look read (registered before it).
    Gate& g = gate_of(name);
    if (g.side_changed) {
      g.side_changed = false;
      m_answers.answer(Op::wait_for_wake);
      return;
    }
    g.wait_pending = true;
    g.block_until = util::monotonic_now() + block;
    return;
  }
  Named* n = find(name);
  if (n != nullptr && n->side_changed) {
    n->side_changed = false;
    m_answers.answer(Op::wait_for_wake);
    return;
  }
  if (n != nullptr && !n->held && n->queued) {
    // Behind an earlier --fair waiter: until a ticket is removed or its waiter dies (the
    // close of its ticket, inotify on .dlock).
    watch_meta();
    n->wait_pending = true;
    n->block_until = util::monotonic_now() + block;
    return;
  }
  if (n != nullptr && !n->held && n->closed_until_ms > 0) {
    // Closed by a side record: until its end, or until it changes (release --force).
    Millis left(std::max<std::int64_t>(0, n->closed_until_ms - util::unix_ms()));
    watch_meta();
    n->wait_pending = true;
    n->block_until = util::monotonic_now() + std::min(block, left);
    return;
  }
  if (n == nullptr || n->held || n->candidates.empty() || n->granted >= 0) {
    m_answers.answer(Op::wait_for_wake);
    return;
  }
  if (n->supersede) {
    watch_meta(); // a newer --supersede waiter's announcement wakes this one
  }
  try {
    if (n->helper < 0) {
      start_helper(*n);
    }
  } catch (const Error& error) {
    m_answers.answer(Op::wait_for_wake, error);
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
                  n.candidate_names.empty() ? n.layout.lock_path()
                                            : n.layout.path_of(n.candidate_names.front()));
    drop_candidates(n);
  }
  if (n.wait_pending) {
    n.wait_pending = false;
    m_answers.answer(Op::wait_for_wake, error);
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
  n.candidate_names.clear();
  n.granted = -1;
  n.wait_pending = false;
}

bool FileStore::still_ours(const Named& n) const
{
  return n.held && names(m_dirfd.get(), n.file, n.lock.get())
         && (!n.record || names(m_metafd.get(), n.record_file, n.record.get()));
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
    if (n.record && names(m_metafd.get(), n.record_file, n.record.get())) {
      // before the unlock: a record outlives no lock
      ::unlinkat(m_metafd.get(), n.record_file.c_str(), 0);
    }
    if (n.lock) {
      flock_retry(n.lock.get(), LOCK_UN); // the command's copy of the descriptor too
    }
  }
  n.record.reset();
  n.lock.reset();
  n.held = false;
}

bool FileStore::reach_directories(Outcome& outcome)
{
  try {
    if (open_directories(false)) {
      return true;
    }
    m_answers.answer(std::move(outcome)); // no directory: nothing is held
  } catch (const Error& error) {
    m_answers.answer(outcome.op, error);
  }
  return false;
}

void FileStore::start_renew(const lock::LockName& name, const lock::RenewRequest& request)
{
  Outcome outcome{.op = Op::renew};
  Named* n = find(name);
  if (n != nullptr && n->held && n->token == request.token) {
    outcome.slot = n->kind.has_slots();
    outcome.held = still_ours(*n);
    // A --replace acquirer's request: the lock stays this token's until it releases.
    std::optional<Announcement> by =
      outcome.held
        ? read_replace_request(m_metafd.get(), n->layout.replace_name(token_fingerprint(n->token)))
        : std::nullopt;
    if (by) {
      outcome.held = false;
      outcome.replaced_by = holder_of(by->who);
    }
    m_answers.answer(std::move(outcome));
    return;
  }
  // Held by another process (a nested run checks its caller's token): its live record, for
  // the file that still has the inode it locked.
  if (!reach_directories(outcome)) {
    return;
  }
  Layout layout(m_dir, name.str());
  std::string record = layout.record_name(token_fingerprint(request.token));
  if (std::optional<Record> r = live_record(m_metafd.get(), record)) {
    struct stat st {};
    std::string file = r->slot >= 0 ? layout.slot_name(r->slot) : layout.lock_name();
    outcome.held = r->name == name.str()
                   && ::fstatat(m_dirfd.get(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0
                   && st.st_ino == r->inode;
    outcome.slot = r->kind.has_slots();
  }
  m_answers.answer(std::move(outcome));
}

void FileStore::start_release(const lock::LockName& name, const std::string& token)
{
  Outcome outcome{.op = Op::release};
  Named* n = find(name);
  if (!token.empty() && n != nullptr && n->token == token && n->held) {
    outcome.held = still_ours(*n);
    if (outcome.held && m_metafd) {
      outcome.kept_for = settle_policy(n->layout, token); // before the unlock
    }
    drop_hold(*n);
    drop_candidates(*n);
    drop_newest(*n);
    drop_ticket(*n);
    m_answers.answer(std::move(outcome));
    return;
  }
  if (!reach_directories(outcome)) {
    return;
  }
  // A file that could not be removed is a release that did not happen: said, not logged as done.
  std::optional<Error> failure;
  auto remove = [&](int dir, const std::string& file, const std::string& shown) {
    if (::unlinkat(dir, file.c_str(), 0) != 0 && errno != ENOENT && !failure) {
      failure = io_error(errno, "remove", shown);
    }
  };
  Layout layout(m_dir, name.str());
  std::vector<std::string> dir_entries = util::directory_entries(m_dirfd.get());
  std::vector<Record> records = live_records(m_metafd.get(), layout.encoded)[layout.encoded];
  if (token.empty()) {
    // --force: the holders' files go (their next check, at once by inotify, finds them
    // replaced); the fencing counter stays.
    std::vector<std::string> files = files_of(layout, dir_entries);
    outcome.held = observe(m_dirfd.get(), layout, files, proc_locks(), records).held;
    for (const std::string& file : files) {
      remove(m_dirfd.get(), file, layout.path_of(file));
    }
    for (const std::string& entry : util::directory_entries(m_metafd.get())) {
      if (entry.starts_with(layout.encoded + "+by+") || entry.starts_with(layout.encoded + "+new+")
          || entry.starts_with(layout.encoded + "+replace+")
          || entry.starts_with(layout.waiter_prefix())
          || entry.starts_with(layout.encoded + "+newtmp+")) {
        remove(m_metafd.get(), entry, layout.meta_path_of(entry));
      }
    }
    // Last, once the lock files are gone (a waiter woken by this finds only new ones): a
    // running holder's --lock-delay starts now; anything else a side record keeps (a min-hold,
    // a delay, garbage) is cleared.
    std::vector<std::string> garbage;
    const std::int64_t now = util::unix_ms();
    for (FoundPolicy& f : read_policies(m_metafd.get(), layout, &garbage)) {
      PolicyRecord& p = f.p;
      bool running = std::any_of(records.begin(), records.end(),
                                 [&](const Record& r) { return r.fingerprint == p.fingerprint; });
      outcome.held = outcome.held || p.hold_until_ms > now;
      p.hold_until_ms = 0;
      p.command_ended = false;
      p.ended_at_ms = now;
      if (!running || p.delay_ms <= 0
          || util::replace_file_at(m_metafd.get(), f.file, p.serialize(), 0644) != 0) {
        remove(m_metafd.get(), f.file, layout.meta_path_of(f.file));
      }
      remove(m_metafd.get(), layout.ended_name(p.fingerprint),
             layout.meta_path_of(layout.ended_name(p.fingerprint)));
    }
    for (const std::string& junk : garbage) {
      ::unlinkat(m_metafd.get(), junk.c_str(), 0); // not dlock's: removed if it can be
    }
  } else {
    // Another process's token: the file it locked goes unless shared with others, then its
    // record. (In that order: the holder ends at the first removal it sees, and a waiter that
    // its end lets in must find the file gone, not take the file this release then removes.)
    std::string record = layout.record_name(token_fingerprint(token));
    std::optional<Record> r = live_record(m_metafd.get(), record);
    if (r && r->name == name.str()) {
      outcome.held = true;
      outcome.kept_for = settle_policy(layout, token);
      if (r->kind.mode != lock::LockKind::Mode::shared) {
        std::string file = r->slot >= 0 ? layout.slot_name(r->slot) : layout.lock_name();
        struct stat st {};
        if (::fstatat(m_dirfd.get(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0
            && st.st_ino == r->inode) {
          remove(m_dirfd.get(), file, layout.path_of(file));
        }
      }
      remove(m_metafd.get(), record, layout.meta_path_of(record));
    }
  }
  if (failure) {
    m_answers.answer(Op::release, std::move(failure));
    return;
  }
  m_answers.answer(std::move(outcome));
}

void FileStore::start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket)
{
  if (auto found = m_gates.find(name.str()); found != m_gates.end()) {
    Gate& g = found->second;
    Outcome outcome{.op = Op::withdraw};
    if (ticket.mode == lock::WaitMode::barrier && g.party) {
      // Withdrawn unless its generation tripped first: then it passed the barrier.
      outcome.gate.open = passed(g, g.parties);
    }
    drop_party(g);
    g.wait_pending = false;
    m_answers.answer(std::move(outcome));
    return;
  }
  if (Named* n = find(name); n != nullptr && !n->held) {
    drop_candidates(*n);
    drop_newest(*n);
    drop_ticket(*n);
    n->closed_until_ms = 0;
  }
  m_answers.answer(Op::withdraw);
}

void FileStore::on_inotify()
{
  alignas(inotify_event) std::array<char, 4096> buffer{};
  std::set<std::string> changed;     // names in .dlock
  std::set<std::string> changed_dir; // names in DIR
  // Names closed (in either): the kernel reports a close before it frees the flocks of the
  // description closed, so a look right after may still find them locked.
  std::set<std::string> closed;
  bool overflow = false;
  bool made = false; // leader: something was made where DIR or .dlock is missing
  for (ssize_t got = 0; (got = ::read(m_inotify.get(), buffer.data(), buffer.size())) > 0;) {
    for (std::size_t at = 0; at + sizeof(inotify_event) <= static_cast<std::size_t>(got);) {
      inotify_event event{};
      std::memcpy(&event, buffer.data() + at, sizeof event);
      const char* text = buffer.data() + at + sizeof event;
      std::size_t length =
        std::min<std::size_t>(event.len, static_cast<std::size_t>(got) - at - sizeof event);
      overflow = overflow || (event.mask & IN_Q_OVERFLOW) != 0;
      // (A close of a directory is a look at it: this process's own included.)
      const bool created = length > 0 && (event.mask & (IN_CREATE | IN_MOVED_TO)) != 0;
      made = made || (m_watch_made >= 0 && event.wd == m_watch_made && created)
             || (m_watch_dir >= 0 && event.wd == m_watch_dir && created
                 && std::string_view(text, ::strnlen(text, length)) == Layout::meta_name);
      if (event.wd == m_watch_meta && length > 0) {
        changed.emplace(text, ::strnlen(text, length));
      } else if (event.wd == m_watch_dir && m_watch_dir >= 0 && length > 0) {
        changed_dir.emplace(text, ::strnlen(text, length));
      }
      if (length > 0 && (event.mask & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE)) != 0) {
        closed.emplace(text, ::strnlen(text, length));
      }
      at += sizeof event + event.len;
    }
  }
  for (auto& named : m_named) {
    Named& n = named.second; // a name a lambda can capture (clang before 16: no binding)
    // A waiter closed by a side record looks again when it changes; a --supersede waiter, when
    // a newer one announces itself.
    bool side = std::any_of(changed.begin(), changed.end(), [&](const std::string& file) {
      return file.starts_with(n.layout.policy_prefix())
             || file.starts_with(n.layout.ended_prefix());
    });
    bool look =
      overflow || (n.closed_until_ms > 0 && side)
      || (n.queued
          && std::any_of(
            changed.begin(), changed.end(),
            [&](const std::string& file) { return file.starts_with(n.layout.ticket_prefix()); }))
      || (n.supersede && std::any_of(changed.begin(), changed.end(), [&](const std::string& file) {
            return file.starts_with(n.layout.waiter_prefix());
          }));
    n.close_seen =
      n.close_seen || (n.queued && std::any_of(closed.begin(), closed.end(), [&](const auto& f) {
                         return f.starts_with(n.layout.ticket_prefix());
                       }));
    if (n.wait_pending && look) {
      n.wait_pending = false;
      m_answers.answer(Op::wait_for_wake);
    } else if (look && !n.held) {
      n.side_changed = true;
    }
  }
  for (auto& [name, g] : m_gates) {
    const Layout& layout = g.layout;
    const bool holders_watched =
      g.mode == lock::WaitMode::watch || g.mode == lock::WaitMode::leader;
    bool look = overflow || (made && g.mode == lock::WaitMode::leader);
    for (const std::string& file : changed_dir) {
      bool lock_file =
        holders_watched
        && (file == layout.lock_name() || file.starts_with(layout.encoded + "+slot."));
      look = look || lock_file;
      g.close_seen = g.close_seen || (lock_file && closed.contains(file));
    }
    for (const std::string& file : changed) {
      switch (g.mode) {
      case lock::WaitMode::watch:  // a --min-hold's end, a holder record gone
      case lock::WaitMode::leader: // and a holder record's arrival (a candidate's acquisition)
        look = look || file.starts_with(layout.policy_prefix())
               || file.starts_with(layout.encoded + "+by+");
        break;
      case lock::WaitMode::barrier:
        look = look || file.starts_with(layout.party_prefix())
               || file.starts_with(layout.tripped_prefix());
        break;
      case lock::WaitMode::latch:
        look = look || file == layout.latch_name();
        break;
      default:
        break;
      }
    }
    if (look && g.wait_pending) {
      g.wait_pending = false;
      m_answers.answer(Op::wait_for_wake);
    } else if (look) {
      g.side_changed = true;
    }
  }
  for (auto& [name, n] : m_named) {
    const std::string replace = n.layout.replace_name(token_fingerprint(n.token));
    check_hold(n, overflow || changed.contains(replace));
  }
}

void FileStore::watch(util::EventLoop& loop)
{
  m_answers.watch(loop);
  bool holding = false;
  for (auto& [name, n] : m_named) {
    holding = holding || n.held || n.wait_pending;
    if (n.held && !n.watched) {
      loop.wake_at(n.next_check);
    }
    if (n.helper_pipe) {
      std::string key = name;
      loop.watch(n.helper_pipe.get(), POLLIN, [this, key](short) { on_helper(key); });
    }
    if (n.wait_pending) {
      loop.wake_at(n.block_until);
    }
  }
  for (auto& [name, g] : m_gates) {
    holding = holding || g.wait_pending;
    if (g.wait_pending) {
      loop.wake_at(g.block_until);
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
    if (n.held && !n.watched && now >= n.next_check) {
      // Watched from now on (if inotify can), then checked: nothing falls between.
      n.watched = now - n.taken_at >= watch_held_after && watch_hold(n);
      check_hold(n, true);
      n.next_check = now + hold_check_every;
    }
    if (n.wait_pending && now >= n.block_until) {
      n.wait_pending = false; // not woken within the block: the caller asks again
      m_answers.answer(Op::wait_for_wake);
    }
  }
  for (auto& [name, g] : m_gates) {
    if (g.wait_pending && now >= g.block_until) {
      g.wait_pending = false;
      m_answers.answer(Op::wait_for_wake);
    }
  }
  return m_answers.next();
}

void FileStore::abandon() noexcept
{
  for (auto it = m_named.begin(); it != m_named.end();) {
    if (it->second.held) {
      it->second.wait_pending = false;
      ++it;
    } else {
      drop_candidates(it->second);
      drop_newest(it->second);
      drop_ticket(it->second);
      it = m_named.erase(it);
    }
  }
  for (auto& [name, g] : m_gates) {
    g.wait_pending = false; // a barrier party stays arrived: its withdrawal says if it passed
    g.side_changed = false;
  }
  m_answers.clear();
}

Error FileStore::timed_out() noexcept
{
  abandon();
  return Error(ExitCode::unavailable, "file store: {} did not answer in time", m_dir);
}

const lock::StoreTraits& FileStore::traits() const noexcept
{
  static const lock::StoreTraits traits{
    .name = "file:// (this host only)",
    .features = lock::features_of(lock::StoreKind::file),
    .left_behind = "the kernel frees it once dlock and its command have exited",
    .loss_cause = "its lock file was removed or replaced (release --force, or someone deleted it)",
  };
  return traits;
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

void FileStore::start_record(const lock::LockName& name, const std::string& text)
{
  Layout layout(m_dir, name.str());
  try {
    if (!open_directories(false) || !m_metafd) {
      m_answers.answer(Op::record,
                       Error(ExitCode::unavailable, "file store: no {} to keep the history in",
                             util::printable(layout.meta_dir())));
      return;
    }
  } catch (const Error& error) {
    m_answers.answer(Op::record, error);
    return;
  }
  int err = append_history(m_metafd.get(), layout, text, util::unix_us());
  std::string path = layout.meta_path_of(layout.history_name(::geteuid()));
  if (err == EAGAIN) { // a flock someone keeps: the event is dropped, never waited for
    m_answers.answer(Op::record, Error(ExitCode::unavailable,
                                       "file store: cannot add to {}: kept locked by another "
                                       "process",
                                       path));
    return;
  }
  if (err != 0) {
    m_answers.answer(Op::record, io_error(err, "add to", path));
    return;
  }
  m_answers.answer(Op::record);
}

std::vector<std::string> FileStore::events(const lock::LockName& name, std::size_t limit,
                                           util::TimePoint)
{
  Layout layout(m_dir, name.str());
  if (!open_directories(false) || !m_metafd) {
    return {};
  }
  std::vector<std::string> warnings;
  std::vector<std::string> texts = read_history(
    m_metafd.get(), layout, std::min(limit, lock::max_history_events), util::unix_us(), warnings);
  for (const std::string& warning : warnings) {
    util::log_warning("file store: {}", warning);
  }
  return texts;
}

lock::LockStatus FileStore::status(const lock::LockName& name, util::TimePoint)
{
  Layout layout(m_dir, name.str());
  if (!open_directories(false)) {
    return status_of(-1, layout, name.str(), Observed{});
  }
  lock::LockStatus status = look_at(m_dirfd.get(), m_metafd.get(), layout, name.str()).status;
  // --fair waiters queue behind the first, which alone waits in flock(2) (counted there too).
  status.waiters =
    std::max(status.waiters, queued_waiters(m_metafd.get(), layout,
                                            m_metafd ? util::directory_entries(m_metafd.get())
                                                     : std::vector<std::string>{}));
  return status;
}

std::vector<lock::LockStatus> FileStore::list(std::string_view pattern, Millis)
{
  std::vector<lock::LockStatus> found;
  if (!open_directories(false)) {
    return found;
  }
  std::vector<std::string> dir_entries = util::directory_entries(m_dirfd.get());
  std::map<std::string, std::vector<Record>> records = live_records(m_metafd.get());
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
  for (const std::string& encoded : encoded_names) {
    const std::vector<Record>& rs = records[encoded];
    std::string name = !rs.empty() ? rs.front().name : lock_name_of(encoded).value_or(encoded);
    Layout layout(m_dir, name);
    layout.encoded = encoded;
    Observed seen = observe(m_dirfd.get(), layout, files_of(layout, dir_entries), locks, rs);
    if (::fnmatch(glob.c_str(), name.c_str(), 0) != 0) {
      continue;
    }
    lock::LockStatus status = status_of(m_metafd.get(), layout, name, seen);
    add_policy(m_metafd.get(), layout, rs, status);
    if (status.held) { // a lock-delay is not held: status shows it, list does not
      found.push_back(std::move(status));
    }
  }
  std::sort(found.begin(), found.end(),
            [](const lock::LockStatus& a, const lock::LockStatus& b) { return a.name < b.name; });
  return found;
}

// ---------------------------------------------------------------------------------------------
// Waiters that take nothing: wait, barrier, latch.

namespace {

// The tab-separated fields of one line.
std::vector<std::string_view> tab_fields_of(std::string_view line)
{
  std::vector<std::string_view> fields;
  for (std::size_t start = 0;;) {
    std::size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string_view::npos ? tab : tab - start));
    if (tab == std::string_view::npos) {
      return fields;
    }
    start = tab + 1;
  }
}

// A barrier party's name after its prefix: GEN+ID.
bool parse_generation_id(std::string_view rest, std::int64_t& generation, std::string& id)
{
  std::size_t plus = rest.find('+');
  if (plus > 19) { // npos too
    return false;
  }
  auto [end, error] = std::from_chars(rest.data(), rest.data() + plus, generation);
  id = std::string(rest.substr(plus + 1));
  return error == std::errc{} && end == rest.data() + plus && generation > 0 && id.size() == 16
         && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// "PREFIX\tN..." with N a positive count: N, or 0.
std::int64_t parse_count_line(std::string_view text, std::string_view prefix)
{
  if (!text.starts_with(prefix) || text.size() <= prefix.size() || text[prefix.size()] != '\t') {
    return 0;
  }
  text.remove_prefix(prefix.size() + 1);
  std::size_t end = text.find_first_of("\t\n");
  std::int64_t value = 0;
  auto [at, error] = std::from_chars(text.data(), text.data() + std::min(end, text.size()), value);
  return error == std::errc{} && at == text.data() + std::min(end, text.size()) && value > 0 ? value
                                                                                             : 0;
}

// The largest barrier marker read (the ids of the parties that passed, 17 bytes each).
constexpr std::size_t max_marker_bytes = 1 << 20;

// A live barrier arrival.
struct Arrival {
  std::int64_t generation = 0;
  std::int64_t parties = 0;
  std::string id;
  QueuePlace place;
};

// A generation's end, as a party that saw it wrote it.
struct Marker {
  std::string file;
  std::int64_t generation = 0;
  std::int64_t parties = 0;
  std::set<std::string> ids;
};

// What .dlock says of one barrier: the live arrivals (sorted by arrival) and the markers;
// arrivals of parties gone are removed on the way (half-made ones once old).
struct BarrierView {
  std::vector<Arrival> arrivals;
  std::vector<Marker> markers;
};

BarrierView look_at_barrier(int meta, const Layout& layout, const std::string& own_file)
{
  BarrierView view;
  const std::string party = layout.party_prefix();
  const std::string fresh = layout.new_party_prefix();
  const std::string tripped = layout.tripped_prefix();
  const std::int64_t now_s = util::unix_ms() / 1000;
  for (const std::string& entry : util::directory_entries(meta)) {
    bool is_party = entry.starts_with(party);
    bool is_marker = entry.starts_with(tripped);
    if (!is_party && !is_marker && !entry.starts_with(fresh)) {
      continue;
    }
    util::UniqueFd fd = util::open_regular_at(meta, entry, O_RDONLY);
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      continue;
    }
    Arrival a;
    if (is_marker) {
      Marker m;
      std::optional<std::string> text = util::read_bounded(fd.get(), max_marker_bytes);
      std::string_view digits = std::string_view(entry).substr(tripped.size());
      auto [end, error] =
        std::from_chars(digits.data(), digits.data() + digits.size(), m.generation);
      if (!text || error != std::errc{} || end != digits.data() + digits.size()
          || m.generation <= 0) {
        continue;
      }
      m.parties = parse_count_line(*text, "dlocktrip1");
      std::size_t ids_at = text->find('\t', std::string_view("dlocktrip1\t").size());
      for (std::size_t at = ids_at == std::string::npos ? text->size() : ids_at + 1;
           at + 16 <= text->size(); at += 17) {
        m.ids.insert(text->substr(at, 16));
      }
      if (m.parties > 0) {
        m.file = entry;
        view.markers.push_back(std::move(m));
      }
      continue;
    }
    if (entry != own_file && ::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) {
      // its party is gone (one half made, only once old: it is locked just after it is made)
      if ((is_party || now_s - st.st_ctim.tv_sec > stale_new_ticket_s)
          && names(meta, entry, fd.get())) {
        ::unlinkat(meta, entry.c_str(), 0);
      }
      continue;
    }
    if (!is_party
        || !parse_generation_id(std::string_view(entry).substr(party.size()), a.generation, a.id)) {
      continue;
    }
    a.parties = parse_count_line(util::read_bounded(fd.get(), 64).value_or(""), "dlockparty1");
    if (a.parties > 0) {
      a.place = place_of(st, entry);
      view.arrivals.push_back(std::move(a));
    }
  }
  std::sort(view.arrivals.begin(), view.arrivals.end(),
            [](const Arrival& x, const Arrival& y) { return x.place < y.place; });
  // A marker none of whose generation's parties waits any more is over (removed if this user
  // may: in a sticky .dlock only its writer and root).
  for (auto it = view.markers.begin(); it != view.markers.end();) {
    bool waited = std::any_of(view.arrivals.begin(), view.arrivals.end(),
                              [&](const Arrival& x) { return x.generation == it->generation; });
    if (!waited) {
      ::unlinkat(meta, it->file.c_str(), 0);
      it = view.markers.erase(it);
    } else {
      ++it;
    }
  }
  return view;
}

// Makes .dlock/ENC+tripped+GEN with text, whole, unless one is there: false if one was.
bool create_marker(int meta, const Layout& layout, std::int64_t generation, const std::string& text)
{
  const std::string marker = layout.tripped_name(generation);
  const std::string temporary = layout.new_tripped_prefix() + util::random_token().substr(0, 16);
  util::UniqueFd fd =
    util::open_regular_at(meta, temporary, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC, 0644, true);
  int err = 0;
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())
      || ::fchmod(fd.get(), 0644) != 0) {
    err = errno;
  } else if (::linkat(meta, temporary.c_str(), meta, marker.c_str(), 0) != 0) {
    err = errno;
  }
  if (fd) {
    ::unlinkat(meta, temporary.c_str(), 0);
  }
  if (err == EEXIST) {
    return false;
  }
  if (err != 0) {
    throw io_error(err, "mark the barrier passed in", layout.meta_path_of(marker));
  }
  return true;
}

// The latch as .dlock/ENC+latch says: its count, and when it expires (CLOCK_REALTIME ms).
struct LatchState {
  std::int64_t count = -1; // -1: none
  std::int64_t expires_ms = 0;
};

std::string latch_text(std::int64_t count, std::int64_t expires_ms)
{
  return fmt::format("dlocklatch1\t{}\t{}\n", count, expires_ms);
}

// The latch open on fd (nullopt for what dlock did not write); an expired one is none.
std::optional<LatchState> read_latch(int fd)
{
  std::optional<std::string> text = util::read_bounded(fd, 128);
  if (!text) {
    return std::nullopt;
  }
  std::vector<std::string_view> fields = tab_fields_of(*text);
  LatchState latch;
  if (fields.size() != 3 || fields[0] != "dlocklatch1") {
    return std::nullopt;
  }
  auto number = [](std::string_view field, std::int64_t& out) {
    auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), out);
    return error == std::errc{} && end == field.data() + field.size() && out >= 0;
  };
  std::string_view last = fields[2];
  if (last.ends_with('\n')) {
    last.remove_suffix(1);
  }
  if (!number(fields[1], latch.count) || !number(last, latch.expires_ms)) {
    return std::nullopt;
  }
  if (latch.expires_ms <= util::unix_ms()) {
    return LatchState{};
  }
  return latch;
}

bool latch_expired(int fd)
{
  std::optional<LatchState> latch = read_latch(fd);
  return latch && latch->count < 0;
}

} // namespace

FileStore::Gate& FileStore::gate_of(const lock::LockName& name)
{
  auto [it, inserted] = m_gates.try_emplace(name.str(), Layout(m_dir, name.str()));
  it->second.name = name.str();
  return it->second;
}

void FileStore::watch_dir()
{
  if (!m_inotify) {
    m_inotify.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  }
  if (m_watch_dir >= 0 || !m_inotify || !m_dirfd) {
    return;
  }
  std::string self = "/proc/self/fd/" + std::to_string(m_dirfd.get());
  // A lock file's close is its holder's end (the last descriptor of a flock closed frees it);
  // .dlock's creation, a leader watcher's first candidate's.
  m_watch_dir = ::inotify_add_watch(m_inotify.get(), self.c_str(),
                                    IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_DELETE | IN_MOVED_FROM
                                      | IN_MOVED_TO | IN_CREATE | IN_ONLYDIR);
}

void FileStore::start_gate(const lock::LockName& name, const lock::GateRequest& request)
{
  Gate& g = gate_of(name);
  g.mode = request.ticket.mode;
  g.id = token_fingerprint(request.ticket.waiter_id);
  g.side_changed = false;
  Outcome outcome{.op = Op::gate};
  try {
    switch (request.ticket.mode) {
    case lock::WaitMode::watch:
      look_watch(g, request, outcome.gate);
      break;
    case lock::WaitMode::barrier:
      look_barrier(g, request, outcome.gate);
      break;
    case lock::WaitMode::latch:
      look_latch(g, request, outcome.gate);
      break;
    case lock::WaitMode::leader:
      look_leader(g, request, outcome.gate);
      break;
    case lock::WaitMode::once:
    case lock::WaitMode::wait:
    case lock::WaitMode::fair:
      throw Error(ExitCode::internal, "a lock waiter at a gate");
    }
  } catch (const Error& error) {
    m_answers.answer(Op::gate, error);
    return;
  }
  m_answers.answer(std::move(outcome));
}

void FileStore::look_watch(Gate& g, const lock::GateRequest& request, lock::GateResult& result)
{
  if (!open_directories(false)) {
    result.open = true; // no directory: nothing is held
    return;
  }
  // Watched before the look: a close after it wakes the wait that follows.
  watch_dir();
  watch_meta();
  const Layout& layout = g.layout;
  const int dir = m_dirfd.get();
  Look look = look_at(dir, m_metafd.get(), layout, g.name);
  const Observed& seen = look.seen;
  const lock::LockStatus& status = look.status;
  if (!status.held) {
    result.open = true;
    return;
  }
  // Who holds it now: each flock granted on its files (by inode and the pid that took it).
  std::set<std::string> holders = granted_flocks(dir, layout, look.files, look.locks);
  if (status.command_ended) {
    holders.insert(fmt::format("min-hold:{}:{}", status.holder.pid, status.holder.acquired_ms));
  }
  if (request.ticket.since == 0) {
    g.holders.clear();
  }
  // None of those seen at the last look holds it: it was free in between (a lock waiter took
  // it at once), which counts as freed. (Each close of a lock file wakes this watcher, so the
  // looks follow every change of holders.)
  bool changed = !g.holders.empty() && !holders.empty()
                 && std::none_of(holders.begin(), holders.end(),
                                 [&](const std::string& h) { return g.holders.contains(h); });
  if (changed) {
    result.open = true;
    return;
  }
  g.holders = std::move(holders);
  result.since = request.ticket.since != 0 ? request.ticket.since : util::unix_us();
  Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
  result.block = std::min(cap, longest_block);
  if (g.close_seen) {
    // Woken by a close whose flock the kernel had not freed yet: one more look soon.
    g.close_seen = false;
    result.block = std::min(result.block, after_close);
  }
  result.lock.holder = status.holder;
  result.lock.holders = static_cast<std::int64_t>(std::max<std::size_t>(1, seen.holders.size()));
  if (status.command_ended) {
    result.lock.lease = lock::AcquireResult::Lease::min_hold;
    result.lock.holder_ttl = Millis(std::max<std::int64_t>(1, status.ttl_ms));
    result.block = std::min(result.block, result.lock.holder_ttl);
  } else {
    result.lock.lease = lock::AcquireResult::Lease::no_expiry;
  }
}

bool FileStore::reach_for_leader()
{
  // A .dlock missing at the last look may have been made since (by the first candidate).
  bool holding = std::any_of(m_named.begin(), m_named.end(),
                             [](const auto& named) { return named.second.held; });
  if (m_dirfd && !m_metafd && !holding) {
    m_dirfd.reset();
  }
  bool present = open_directories(false);
  if (!m_inotify) {
    m_inotify.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  }
  if (m_watch_made >= 0 && m_inotify && m_watch_made != m_watch_dir) {
    ::inotify_rm_watch(m_inotify.get(), m_watch_made);
  }
  m_watch_made = -1;
  if (present) {
    return true; // without .dlock: watch_dir() sees it made
  }
  // The nearest directory above DIR that exists: the next component is made there. (Only
  // watched, never read: a path another user controls costs a wake-up at most.)
  for (std::size_t slash = m_dir.rfind('/'); m_inotify && slash != std::string::npos;
       slash = slash == 0 ? std::string::npos : m_dir.rfind('/', slash - 1)) {
    std::string parent = slash == 0 ? "/" : m_dir.substr(0, slash);
    util::UniqueFd fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK));
    if (fd) {
      std::string self = "/proc/self/fd/" + std::to_string(fd.get());
      m_watch_made =
        ::inotify_add_watch(m_inotify.get(), self.c_str(), IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
      break;
    }
  }
  return present;
}

void FileStore::look_leader(Gate& g, const lock::GateRequest& request, lock::GateResult& result)
{
  const std::int64_t since = request.ticket.since;
  Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
  result.block = std::min(cap, longest_block); // the safety net: flock(1) takes it unannounced
  if (!reach_for_leader()) {
    g.term = 0;
    g.term_flocks.clear();
    result.since = 0; // no directory: nobody leads
    result.open = since != 0;
    return;
  }
  // Watched before the look: a record's arrival or removal, or a lock file's close, after it
  // wakes the wait that follows.
  watch_dir();
  watch_meta();
  const Layout& layout = g.layout;
  const int dir = m_dirfd.get();
  Look look = look_at(dir, m_metafd.get(), layout, g.name);
  const std::vector<Record>& records = look.records;
  const Observed& seen = look.seen;
  const lock::LockStatus& status = look.status;
  std::set<std::string> flocks = granted_flocks(dir, layout, look.files, look.locks);
  std::int64_t term = 0;
  bool unrecorded = false;
  if (!records.empty()) {
    term = term_of(holder_of(records.front()));
    g.term = term;
    g.term_flocks = flocks;
  } else if (!flocks.empty() && g.term != 0
             && std::any_of(flocks.begin(), flocks.end(),
                            [&](const std::string& f) { return g.term_flocks.contains(f); })) {
    term = g.term; // the holder seen with its record, between the record's removal and its unlock
  } else {
    g.term = 0;
    g.term_flocks.clear();
    if (status.command_ended) {
      term = term_of(status.holder); // its --min-hold outlives it
    } else if (!flocks.empty()) {
      std::string named = "flock";
      for (const std::string& f : flocks) {
        named += "\t" + f;
      }
      term = term_of(named);
      unrecorded = true;
    }
  }
  if (status.held) {
    result.lock.holder = status.holder;
    result.lock.holders = static_cast<std::int64_t>(std::max<std::size_t>(1, seen.holders.size()));
    result.lock.lease = lock::AcquireResult::Lease::no_expiry;
    if (status.command_ended) {
      result.lock.lease = lock::AcquireResult::Lease::min_hold;
      result.lock.holder_ttl = Millis(std::max<std::int64_t>(1, status.ttl_ms));
      result.block = std::min(result.block, result.lock.holder_ttl); // its end is unannounced
    }
  }
  if (!unrecorded) {
    g.unrecorded = 0;
  } else if (term != since) {
    util::TimePoint now = util::monotonic_now();
    if (g.unrecorded != term) {
      g.unrecorded = term;
      g.unrecorded_at = now;
    }
    auto left = unrecorded_grace - std::chrono::duration_cast<Millis>(now - g.unrecorded_at);
    if (left > Millis(0)) {
      // Not a leader yet: a dlock's record may be on its way (its arrival wakes this watcher).
      result.since = since;
      result.block = std::min(result.block, left);
      g.close_seen = false;
      return;
    }
  }
  result.since = term;
  result.open = term != since;
  if (!result.open && g.close_seen) {
    // Woken by a close whose flock the kernel had not freed yet: one more look soon.
    result.block = std::min(result.block, after_close);
  }
  g.close_seen = false;
}

void FileStore::arrive(Gate& g, std::int64_t generation, std::int64_t parties)
{
  const int meta = m_metafd.get();
  const std::string final_name = g.layout.party_name(generation, g.id);
  if (g.party) {
    // Moved to another generation: the same file (and flock), renamed.
    if (::renameat(meta, g.party_file.c_str(), meta, final_name.c_str()) != 0) {
      throw io_error(errno, "move a barrier party in", g.layout.meta_path_of(final_name));
    }
    g.party_file = final_name;
    g.generation = generation;
    return;
  }
  const std::string text = fmt::format("dlockparty1\t{}\n", parties);
  int err = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::string temporary = g.layout.new_party_prefix() + util::random_token().substr(0, 16);
    util::UniqueFd fd =
      util::open_regular_at(meta, temporary, O_RDWR | O_CREAT | O_EXCL | O_TRUNC, 0644, true);
    if (!fd || flock_retry(fd.get(), LOCK_EX | LOCK_NB) != 0
        || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      err = errno;
      if (fd) {
        ::unlinkat(meta, temporary.c_str(), 0);
      }
      break;
    }
    if (::renameat(meta, temporary.c_str(), meta, final_name.c_str()) == 0) {
      g.party = std::move(fd);
      g.party_file = final_name;
      g.generation = generation;
      return;
    }
    err = errno;
    ::unlinkat(meta, temporary.c_str(), 0);
    if (err != ENOENT) {
      break;
    }
  }
  throw io_error(err, "arrive at the barrier in", g.layout.meta_path_of(final_name));
}

void FileStore::drop_party(Gate& g) noexcept
{
  if (g.party && ::getpid() == m_pid && names(m_metafd.get(), g.party_file, g.party.get())) {
    ::unlinkat(m_metafd.get(), g.party_file.c_str(), 0);
    // The last party of a generation to leave sees none of it waiting, and removes its marker.
    try {
      look_at_barrier(m_metafd.get(), g.layout, "");
    } catch (...) { // NOLINT(bugprone-empty-catch): left for the next party to remove
    }
  }
  g.party.reset();
  g.party_file.clear();
  g.generation = 0;
}

bool FileStore::passed(const Gate& g, std::int64_t parties)
{
  BarrierView view = look_at_barrier(m_metafd.get(), g.layout, g.party_file);
  return g.generation > 0
         && std::any_of(view.markers.begin(), view.markers.end(), [&](const Marker& m) {
              return m.generation == g.generation && m.parties == parties && m.ids.contains(g.id);
            });
}

void FileStore::look_barrier(Gate& g, const lock::GateRequest& request, lock::GateResult& result)
{
  prepare_directory();
  if (!m_metafd) {
    throw Error(ExitCode::unavailable, "file store: a barrier needs {}, which cannot be opened",
                g.layout.meta_dir());
  }
  watch_meta(); // before the look: an arrival or a marker after it wakes the wait that follows
  const int meta = m_metafd.get();
  const std::int64_t parties = request.parties;
  result.parties = parties;
  g.parties = parties;
  BarrierView view = look_at_barrier(meta, g.layout, g.party_file);
  auto marked = [&](std::int64_t generation, const std::string& id) {
    return std::any_of(view.markers.begin(), view.markers.end(), [&](const Marker& m) {
      return m.generation == generation && m.parties == parties && m.ids.contains(id);
    });
  };
  auto closed = [&](std::int64_t generation) {
    return std::any_of(view.markers.begin(), view.markers.end(),
                       [&](const Marker& m) { return m.generation == generation; });
  };
  if (g.party && marked(g.generation, g.id)) {
    result.open = true; // its generation tripped
    result.generation = g.generation;
    drop_party(g);
    return;
  }
  // Another barrier of that name is in progress with another --parties: nothing registered.
  for (const Arrival& a : view.arrivals) {
    if (a.id != g.id && a.parties != parties && !closed(a.generation)) {
      drop_party(g);
      result.parties = a.parties;
      return;
    }
  }
  // Join the oldest generation that has not tripped (a new one if none): parties that
  // arrived at once in generations of their own meet there at their next look.
  std::int64_t target = 0;
  for (const Arrival& a : view.arrivals) {
    if (!closed(a.generation) && (target == 0 || a.generation < target)) {
      target = a.generation;
    }
  }
  if (target == 0) {
    target = std::max<std::int64_t>(1, util::unix_us());
  }
  if (!g.party || g.generation != target) {
    arrive(g, target, parties);
    view = look_at_barrier(meta, g.layout, g.party_file);
  }
  std::vector<std::string> members;
  for (const Arrival& a : view.arrivals) {
    if (a.generation == target && a.parties == parties) {
      members.push_back(a.id);
    }
  }
  result.generation = target;
  result.arrived = static_cast<std::int64_t>(members.size());
  auto mine = std::find(members.begin(), members.end(), g.id);
  if (static_cast<std::int64_t>(members.size()) >= parties && mine != members.end()
      && mine - members.begin() < parties) {
    // The last of them: the first N that arrived pass, and are told so by a marker.
    std::string text = fmt::format("dlocktrip1\t{}\t", parties);
    for (std::int64_t i = 0; i < parties; ++i) {
      text += members[static_cast<std::size_t>(i)] + (i + 1 < parties ? " " : "\n");
    }
    // One marker a generation, made whole and only if none is there (parties that saw the
    // generation at other moments may count different first N): the first one made is what
    // every party of it goes by.
    if (parties > 1 && !create_marker(meta, g.layout, target, text)) {
      view = look_at_barrier(meta, g.layout, g.party_file);
      if (!marked(target, g.id)) {
        Millis cap =
          request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
        result.block = std::min(cap, longest_block);
        return; // not among those that passed: its next look moves it on
      }
    }
    result.open = true;
    result.arrived = parties;
    drop_party(g);
    return;
  }
  Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
  result.block = std::min(cap, longest_block);
}

void FileStore::look_latch(Gate& g, const lock::GateRequest& request, lock::GateResult& result)
{
  Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : longest_block;
  result.block = std::min(cap, longest_block);
  if (!open_directories(false) || !m_metafd) {
    return; // not set yet (-1)
  }
  watch_meta(); // before the look: a count-down after it wakes the wait that follows
  util::UniqueFd fd = util::open_regular_at(m_metafd.get(), g.layout.latch_name(), O_RDONLY);
  std::optional<LatchState> latch = fd ? read_latch(fd.get()) : std::nullopt;
  if (!latch) {
    return;
  }
  result.count = latch->count;
  if (latch->count == 0) {
    result.open = true;
  } else if (latch->count > 0) {
    result.block = std::min(result.block,
                            Millis(std::max<std::int64_t>(1, latch->expires_ms - util::unix_ms())));
  }
}

void FileStore::start_set_latch(const lock::LockName& name, std::int64_t count, Millis expire)
{
  try {
    prepare_directory();
    Layout layout(m_dir, name.str());
    const std::string latch = layout.latch_name();
    std::int64_t now = util::unix_ms();
    std::int64_t expires = expire.count() > INT64_MAX - now
                             ? INT64_MAX
                             : now + std::max<std::int64_t>(1, expire.count());
    int err = m_metafd
                ? util::replace_file_at(m_metafd.get(), latch, latch_text(count, expires), 0644)
                : ENOENT;
    if (err != 0) {
      throw io_error(err, "set the latch", layout.meta_path_of(latch));
    }
    m_answers.answer(Op::set_latch);
  } catch (const Error& error) {
    m_answers.answer(Op::set_latch, error);
  }
}

void FileStore::start_count_down(const lock::LockName& name)
{
  Outcome outcome{.op = Op::count_down};
  outcome.gate.count = -1;
  try {
    if (!open_directories(false) || !m_metafd) {
      m_answers.answer(std::move(outcome));
      return;
    }
    const int meta = m_metafd.get();
    Layout layout(m_dir, name.str());
    const std::string latch = layout.latch_name();
    const std::string shown = layout.meta_path_of(latch);
    for (int attempt = 0; attempt < 100; ++attempt) {
      util::UniqueFd fd = util::open_regular_at(meta, latch, O_RDONLY, 0600, true);
      struct stat st {};
      if (!fd || ::fstat(fd.get(), &st) != 0) {
        if (errno != ENOENT) {
          throw io_error(errno, "count down", shown);
        }
        break; // not set
      }
      // Count-downs take turns on the file's flock; another user's (a latch another user set)
      // is never waited on: it could keep it forever.
      bool own = st.st_uid == ::geteuid();
      if (flock_retry(fd.get(), own ? LOCK_EX : LOCK_EX | LOCK_NB) != 0) {
        throw Error(ExitCode::unavailable,
                    "file store: cannot count down {}: {} (it belongs to uid {})", shown,
                    errno == EWOULDBLOCK ? "another process keeps it locked" : std::strerror(errno),
                    st.st_uid);
      }
      if (!names(meta, latch, fd.get())) {
        continue; // replaced meanwhile (a count-down before this one, or --count): again
      }
      std::optional<LatchState> state = read_latch(fd.get());
      if (!state || state->count < 0) {
        ::unlinkat(meta, latch.c_str(), 0); // expired, or not dlock's
        break;
      }
      outcome.gate.count = state->count;
      if (state->count > 0) {
        outcome.gate.count = state->count - 1;
        // Replaced whole (readers never see half of it), before this one's flock is let go.
        if (int err = util::replace_file_at(meta, latch,
                                            latch_text(state->count - 1, state->expires_ms), 0644);
            err != 0) {
          throw io_error(err, "count down", shown);
        }
      }
      break;
    }
    m_answers.answer(std::move(outcome));
  } catch (const Error& error) {
    m_answers.answer(Op::count_down, error);
  }
}

} // namespace dlock::file
