#include "process/guard.hpp"

#include "process/process_table.hpp"
#include "util/files.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace dlock::process::guard {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t never = INT64_MAX;

// Signals whose disposition dlock or the guard changes and the command must get back at
// their default.
constexpr int reset_signals[] = {SIGPIPE, SIGTTOU, SIGTTIN, SIGTSTP, SIGINT,  SIGTERM,
                                 SIGHUP,  SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD, SIGCONT};

std::int64_t now_ns()
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
    .count();
}

bool read_exact(int fd, void* data, std::size_t size)
{
  auto* bytes = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::read(fd, bytes, size);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// posix_spawn attributes for the command: the guard's group, the signal mask dlock started
// with, default dispositions.
class SpawnAttributes {
public:
  explicit SpawnAttributes(const sigset_t& mask)
  {
    ::posix_spawnattr_init(&m_attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int sig : reset_signals) {
      sigaddset(&defaults, sig);
    }
    ::posix_spawnattr_setpgroup(&m_attr, ::getpid());
    ::posix_spawnattr_setsigmask(&m_attr, &mask);
    ::posix_spawnattr_setsigdefault(&m_attr, &defaults);
    ::posix_spawnattr_setflags(&m_attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK
                                          | POSIX_SPAWN_SETSIGDEF);
  }
  ~SpawnAttributes() { ::posix_spawnattr_destroy(&m_attr); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
  const posix_spawnattr_t* get() const { return &m_attr; }

private:
  posix_spawnattr_t m_attr{};
};

// Where execvp would find file: itself if it names a path, else the first executable regular
// file of that name in $PATH.
std::string find_in_path(const std::string& file)
{
  if (file.find('/') != std::string::npos) {
    return file;
  }
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/bin:/usr/bin";
  while (true) {
    std::size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + file;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)
        && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string_view::npos) {
      return file;
    }
    dirs.remove_prefix(colon + 1);
  }
}

// Closes every descriptor but those in keep: close_range around them, or where the kernel
// lacks it (before 5.9), each one /proc/self/fd lists.
void close_all_except(std::vector<int> keep)
{
  std::sort(keep.begin(), keep.end());
  unsigned first = 0;
  bool ranges = true;
  for (int fd : keep) {
    if (static_cast<unsigned>(fd) > first) {
      ranges = ranges && ::close_range(first, static_cast<unsigned>(fd) - 1, 0) == 0;
    }
    first = std::max(first, static_cast<unsigned>(fd) + 1);
  }
  ranges = ranges && ::close_range(first, ~0U, 0) == 0;
  if (ranges) {
    return;
  }
  for (int fd : util::open_descriptors()) {
    if (!std::binary_search(keep.begin(), keep.end(), fd)) {
      ::close(fd);
    }
  }
}

// Takes the descriptors dlock passed for the command (count of them), not close-on-exec so
// that the command inherits them.
std::vector<int> receive_descriptors(int socket, std::int64_t count)
{
  if (count <= 0 || count > static_cast<std::int64_t>(most_inherited)) {
    return {};
  }
  char byte = 0;
  iovec data{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * most_inherited)]{};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  ssize_t n = 0;
  do {
    n = ::recvmsg(socket, &message, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  std::vector<int> fds;
  for (cmsghdr* header = n < 0 ? nullptr : CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS) {
      std::size_t received = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      fds.resize(fds.size() + received);
      std::memcpy(fds.data() + fds.size() - received, CMSG_DATA(header), received * sizeof(int));
    }
  }
  return fds;
}

class Guard {
public:
  Guard(int requests, int reports, int passing, const sigset_t& command_mask,
        const std::string& program)
    : m_requests(requests), m_reports(reports), m_passing(passing), m_command_mask(command_mask),
      m_program(program), m_program_path(find_in_path(program))
  {
  }

  [[noreturn]] void run()
  {
    ::setpgid(0, 0);
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    // Job control from the terminal must not stop the guard: it would stop enforcing.
    ::signal(SIGTSTP, SIG_IGN);
    ::signal(SIGTTIN, SIG_IGN);
    ::signal(SIGTTOU, SIG_IGN);
    ::signal(SIGPIPE, SIG_IGN);
    sigset_t watched;
    sigemptyset(&watched);
    for (int sig :
         {SIGCHLD, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCONT, SIGALRM}) {
      sigaddset(&watched, sig);
    }
    ::sigprocmask(SIG_BLOCK, &watched, nullptr);
    m_signals = ::signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC);

    while (true) {
      enforce_deadlines();
      pollfd fds[2] = {{m_requests, POLLIN, 0}, {m_signals, POLLIN, 0}};
      ::poll(fds, 2, poll_timeout());
      if ((fds[1].revents & POLLIN) != 0) {
        on_signals();
      }
      if (fds[0].revents != 0) {
        on_request();
      }
      if (m_command_done) {
        // The command and everything it started are dead and reaped, and dlock was told:
        // nothing is left to guard. Exiting now overlaps dlock's release.
        ::_exit(0);
      }
    }
  }

private:
  bool command_running() const { return m_command > 0 && !m_command_done; }

  int poll_timeout() const
  {
    if (!command_running()) {
      return -1;
    }
    std::int64_t next = m_term_sent ? m_kill_at : std::min(m_terminate_at, m_kill_at);
    if (next == never || m_kill_sent) {
      return -1;
    }
    std::int64_t left_ms = (next - now_ns()) / 1'000'000 + 1;
    return static_cast<int>(std::clamp<std::int64_t>(left_ms, 0, 60'000));
  }

  void report(Report kind, std::int32_t value)
  {
    Message message;
    message.kind = kind;
    message.value = value;
    while (::write(m_reports, &message, sizeof message) < 0 && errno == EINTR) {
    }
  }

  // The lease could have expired by now as far as dlock last confirmed: stop everything.
  void enforce_deadlines()
  {
    if (!command_running()) {
      return;
    }
    std::int64_t t = now_ns();
    if (!m_kill_sent && t >= m_kill_at) {
      m_kill_sent = true;
      report(deadline_passed, SIGKILL);
      kill_tree();
      return;
    }
    if (!m_term_sent && t >= m_terminate_at) {
      m_term_sent = true;
      report(deadline_passed, SIGTERM);
      signal_descendants(SIGTERM);
      signal_descendants(SIGCONT); // a stopped process acts on SIGTERM only once continued
    }
  }

  void on_signals()
  {
    signalfd_siginfo info{};
    while (::read(m_signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap();
      } else if ((sig == SIGINT || sig == SIGQUIT) && info.ssi_code == SI_KERNEL) {
        // Sent by the terminal (Ctrl-C, Ctrl-\) to the command's foreground group.
        report(terminal_signal, sig);
      }
      // Anything else is dlock forwarding a signal to the group: meant for the command.
    }
  }

  void reap()
  {
    int status = 0;
    pid_t pid = 0;
    while ((pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED)) > 0) {
      if (pid != m_command || m_command_done) {
        continue; // an orphan of the command's tree, reparented to us: reaped
      }
      if (WIFSTOPPED(status)) {
        report(stopped, WSTOPSIG(status));
      } else if (WIFCONTINUED(status)) {
        report(continued, 0);
      } else {
        command_ended(status);
      }
    }
  }

  void command_ended(int status)
  {
    m_command_done = true;
    m_status = status;
    kill_tree();
    report(exited, m_status);
  }

  // SIGKILLs every descendant and reaps them all, until none is left.
  void kill_tree()
  {
    // Every descendant is below a child of the guard (a subreaper): without a child there is
    // nothing to search /proc for, the common case once the command has exited.
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WSTOPPED | WCONTINUED | WNOHANG | WNOWAIT) < 0
        && errno == ECHILD) {
      return;
    }
    while (true) {
      std::vector<pid_t> live = live_descendants(::getpid());
      for (pid_t pid : live) {
        ::kill(pid, SIGKILL);
      }
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, live.empty() ? WNOHANG : 0);
      if (pid > 0) {
        if (pid == m_command && !m_command_done) {
          m_command_done = true;
          m_status = status;
          report(exited, status);
        }
        continue;
      }
      if (pid < 0 && errno == EINTR) {
        continue;
      }
      if (pid < 0 && errno == ECHILD && live.empty()) {
        return;
      }
      if (pid == 0) {
        ::usleep(1000); // a child not yet visible in /proc, or not yet dead: look again
      }
    }
  }

  void on_request()
  {
    Message message;
    if (!read_exact(m_requests, &message, sizeof message)) {
      // dlock is gone (or done): nothing of the command may outlive it.
      kill_tree();
      ::_exit(0);
    }
    if (message.kind == spawn) {
      do_spawn(message);
    } else if (message.kind == hold) {
      // Kept, close-on-exec, until the guard exits (after kill_tree): never the command's.
      for (int fd : receive_descriptors(m_passing, message.b)) {
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);
        m_held.push_back(fd);
      }
    } else if (message.kind == deadlines) {
      if (m_term_sent) {
        // Stopping has begun: a later renewal may not give the command more time.
        m_kill_at = std::min(m_kill_at, message.b);
      } else {
        m_terminate_at = message.a;
        m_kill_at = message.b;
      }
    }
  }

  void do_spawn(const Message& message)
  {
    std::string payload(static_cast<std::size_t>(message.a), '\0');
    if (!read_exact(m_requests, payload.data(), payload.size())) {
      kill_tree();
      ::_exit(0);
    }
    std::vector<char*> argv;
    std::vector<char*> envp;
    for (std::size_t pos = 0; pos < payload.size(); pos = payload.find('\0', pos) + 1) {
      (static_cast<std::int32_t>(argv.size()) < message.value ? argv : envp)
        .push_back(payload.data() + pos);
    }
    if (argv.empty()) {
      report(spawn_failed, ENOENT);
      return;
    }
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    // The guard holds nothing else of dlock's by now (guard_main closed it): with these, the
    // command's only descriptors are 0, 1, 2. They are closed below once it has its copies.
    receive_descriptors(m_passing, message.b);
    SpawnAttributes attributes(m_command_mask);
    pid_t pid = -1;
    // The program found in $PATH when the guard started: no search after the lock is taken.
    // Gone since, it is searched for again, with execvp's errors.
    const bool found = argv[0] == m_program && m_program_path != m_program;
    int error = found ? ::posix_spawn(&pid, m_program_path.c_str(), nullptr, attributes.get(),
                                      argv.data(), envp.data())
                      : ENOENT;
    if (!found || error == ENOENT || error == EACCES) {
      error = ::posix_spawnp(&pid, argv[0], nullptr, attributes.get(), argv.data(), envp.data());
    }
    if (error == ENOEXEC) {
      // A script without "#!": run it with /bin/sh, as execvp and flock(1) do.
      std::string path = find_in_path(argv[0]);
      std::vector<char*> shell_argv{const_cast<char*>("/bin/sh"), path.data()};
      shell_argv.insert(shell_argv.end(), argv.begin() + 1, argv.end());
      error =
        ::posix_spawn(&pid, "/bin/sh", nullptr, attributes.get(), shell_argv.data(), envp.data());
    }
    if (error != 0) {
      report(spawn_failed, error);
      return;
    }
    m_command = pid;
    report(started, pid);
    // The command has its own copies; the guard keeps no terminal or pipe of the user's open.
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd <= 2 && null >= 0; ++fd) {
      ::dup2(null, fd);
    }
    std::vector<int> keep{0, 1, 2, m_requests, m_reports, m_passing, m_signals};
    keep.insert(keep.end(), m_held.begin(), m_held.end());
    close_all_except(keep);
  }

  int m_requests;
  int m_reports;
  int m_passing;
  sigset_t m_command_mask;
  std::string m_program;      // the command's argv[0] as dlock was given it
  std::string m_program_path; // where $PATH finds it (m_program itself if nowhere, or a path)
  int m_signals = -1;
  std::vector<int> m_held; // Request hold's descriptors: the lock lives while the guard does
  pid_t m_command = -1;
  bool m_command_done = false;
  int m_status = 0;
  std::int64_t m_terminate_at = never;
  std::int64_t m_kill_at = never;
  bool m_term_sent = false;
  bool m_kill_sent = false;
};

} // namespace

void guard_main(int requests_fd, int reports_fd, int passing_fd, const sigset_t& command_mask,
                const std::string& program)
{
  // dlock's store sessions, lock files and terminal are no business of the guard's, nor of
  // the command's: the guard was forked with them all.
  close_all_except({0, 1, 2, requests_fd, reports_fd, passing_fd});
  try {
    Guard(requests_fd, reports_fd, passing_fd, command_mask, program).run();
  } catch (...) {
    // Out of memory, say: nothing of the command may outlive its guard (dlock sees it gone).
    signal_descendants(SIGKILL);
    throw;
  }
}

} // namespace dlock::process::guard
