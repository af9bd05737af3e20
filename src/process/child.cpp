#include "process/child.hpp"

#include "util/error.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

extern char** environ;

namespace dlock::process {

namespace {

// Signals whose disposition dlock changes and the command must get back at their default.
constexpr int reset_signals[] = {SIGPIPE, SIGTTOU, SIGTTIN, SIGTSTP, SIGINT, SIGTERM, SIGHUP,
                                 SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD};

// Whether dlock itself runs in the foreground of the terminal on stdin.
bool in_terminal_foreground()
{
  return ::isatty(STDIN_FILENO) == 1 && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
}

// The environment for the command: dlock's own with spec.env set on top.
std::vector<std::string> build_environment(const CommandSpec& spec)
{
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    bool overridden = false;
    for (const auto& [name, value] : spec.env) {
      overridden = overridden || (text.size() > name.size() && text.substr(0, name.size()) == name
                                  && text[name.size()] == '=');
    }
    if (!overridden) {
      env.emplace_back(text);
    }
  }
  for (const auto& [name, value] : spec.env) {
    env.push_back(name + "=" + value);
  }
  return env;
}

// In the forked guard: leads the group, waits for dlock's end of the pipe to close, then
// kills the group (itself included).
[[noreturn]] void run_guard(int pipe_read, const sigset_t& mask)
{
  ::setpgid(0, 0);
  // Job control from a terminal must not stop the guard; forwarded signals stay blocked.
  ::signal(SIGTSTP, SIG_IGN);
  ::signal(SIGTTIN, SIG_IGN);
  ::signal(SIGTTOU, SIG_IGN);
  sigset_t blocked = mask;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM}) {
    sigaddset(&blocked, sig);
  }
  ::sigprocmask(SIG_SETMASK, &blocked, nullptr);
  if (pipe_read != 3) {
    ::dup2(pipe_read, 3);
  }
  ::close_range(0, 2, 0);
  ::close_range(4, UINT_MAX, 0);
  char byte = 0;
  while (::read(3, &byte, 1) < 0 && errno == EINTR) {
  }
  ::kill(0, SIGKILL);
  ::_exit(0);
}

int shell_status(int status)
{
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status);
  }
  if (WIFSIGNALED(status)) {
    return 128 + WTERMSIG(status);
  }
  return 128;
}

// posix_spawn attributes and the arrays it wants, freed together.
class SpawnAttributes {
public:
  SpawnAttributes(pid_t group, const sigset_t& mask)
  {
    ::posix_spawnattr_init(&m_attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int sig : reset_signals) {
      sigaddset(&defaults, sig);
    }
    ::posix_spawnattr_setpgroup(&m_attr, group);
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

} // namespace

ProcessGroup::ProcessGroup(const sigset_t& child_mask) : m_child_mask(child_mask)
{
  int guard_pipe[2];
  if (::pipe2(guard_pipe, O_CLOEXEC) != 0) {
    throw Error(ExitCode::internal, "pipe failed: {}", std::strerror(errno));
  }
  pid_t guard = ::fork();
  if (guard == 0) {
    ::close(guard_pipe[1]);
    run_guard(guard_pipe[0], child_mask);
  }
  ::close(guard_pipe[0]);
  if (guard < 0) {
    ::close(guard_pipe[1]);
    throw Error(ExitCode::internal, "fork failed: {}", std::strerror(errno));
  }
  ::setpgid(guard, guard); // also here, so the group exists before the command joins it
  m_guard = guard;
  m_guard_pipe.reset(guard_pipe[1]);
}

ProcessGroup::~ProcessGroup()
{
  if (m_command > 0 && !m_reaped) {
    ::kill(-m_guard, SIGKILL);
    ::waitpid(m_command, nullptr, 0);
  }
  give_back_terminal();
  m_guard_pipe.reset(); // the guard wakes up, kills what is left of its group, and exits
  ::waitpid(m_guard, nullptr, 0);
}

void ProcessGroup::spawn(const CommandSpec& spec)
{
  if (spec.argv.empty()) {
    throw Error(ExitCode::usage, "no command given");
  }
  std::vector<std::string> env = build_environment(spec);
  std::vector<char*> argv;
  for (const auto& arg : spec.argv) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& entry : env) {
    envp.push_back(entry.data());
  }
  envp.push_back(nullptr);

  if (in_terminal_foreground()) {
    auto previous = ::signal(SIGTTOU, SIG_IGN);
    m_owns_terminal = ::tcsetpgrp(STDIN_FILENO, m_guard) == 0;
    ::signal(SIGTTOU, previous);
  }
  SpawnAttributes attributes(m_guard, m_child_mask);
  pid_t pid = -1;
  int error = ::posix_spawnp(&pid, argv[0], nullptr, attributes.get(), argv.data(), envp.data());
  if (error != 0) {
    give_back_terminal();
    ExitCode code = error == ENOENT ? ExitCode::not_found : ExitCode::cannot_execute;
    throw Error(code, "cannot run '{}': {}", spec.argv[0], std::strerror(error));
  }
  m_command = pid;
}

void ProcessGroup::signal_group(int sig) const noexcept
{
  if (m_command > 0 && !m_reaped) {
    ::kill(-m_guard, sig);
  }
}

std::optional<int> ProcessGroup::try_wait()
{
  if (m_command <= 0 || m_reaped) {
    return std::nullopt;
  }
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(m_command), &info, WEXITED | WNOHANG | WNOWAIT) != 0
      || info.si_pid == 0) {
    return std::nullopt;
  }
  // The guard keeps the group id alive, so leftovers can be killed before the lock goes.
  ::kill(-m_guard, SIGKILL);
  int status = 0;
  while (::waitpid(m_command, &status, 0) < 0 && errno == EINTR) {
  }
  m_reaped = true;
  give_back_terminal();
  return shell_status(status);
}

void ProcessGroup::give_back_terminal() noexcept
{
  if (m_owns_terminal) {
    m_owns_terminal = false;
    auto previous = ::signal(SIGTTOU, SIG_IGN);
    ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
    ::signal(SIGTTOU, previous);
  }
}

} // namespace dlock::process
