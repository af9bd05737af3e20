#include "process/child.hpp"

#include "util/error.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
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

// In the forked child: becomes the command, or reports errno on the pipe and exits 127.
[[noreturn]] void exec_child(const std::vector<char*>& argv, const std::vector<char*>& envp,
                             const sigset_t& mask, pid_t parent, bool take_terminal,
                             int error_pipe)
{
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {
    ::_exit(127); // dlock died before the death signal was armed
  }
  if (take_terminal) {
    ::signal(SIGTTOU, SIG_IGN);
    ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
  }
  for (int sig : reset_signals) {
    ::signal(sig, SIG_DFL);
  }
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  ::execvpe(argv[0], argv.data(), envp.data());
  int error = errno;
  ssize_t ignored = ::write(error_pipe, &error, sizeof error);
  (void)ignored;
  ::_exit(127);
}

// In the forked guard: waits for dlock's end of the pipe to close, then kills the group.
[[noreturn]] void run_guard(int pipe_read, pid_t group)
{
  ::setpgid(0, 0); // out of dlock's group: a signal to dlock's job does not reach the guard
  if (pipe_read != 3) {
    ::dup2(pipe_read, 3);
  }
  ::close_range(0, 2, 0);
  ::close_range(4, UINT_MAX, 0);
  char byte = 0;
  while (::read(3, &byte, 1) < 0 && errno == EINTR) {
  }
  ::kill(-group, SIGKILL);
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

} // namespace

ChildProcess ChildProcess::spawn(const CommandSpec& spec, const sigset_t& child_mask)
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

  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) {
    throw Error(ExitCode::internal, "pipe failed: {}", std::strerror(errno));
  }
  util::UniqueFd error_read(error_pipe[0]);
  util::UniqueFd error_write(error_pipe[1]);
  bool take_terminal = in_terminal_foreground();
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    throw Error(ExitCode::internal, "fork failed: {}", std::strerror(errno));
  }
  if (pid == 0) {
    exec_child(argv, envp, child_mask, parent, take_terminal, error_write.get());
  }
  ::setpgid(pid, pid); // also here, so the group exists before we signal it
  error_write.reset();

  int exec_error = 0;
  ssize_t n = 0;
  do {
    n = ::read(error_read.get(), &exec_error, sizeof exec_error);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof exec_error)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (take_terminal) {
      ::signal(SIGTTOU, SIG_IGN);
      ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
      ::signal(SIGTTOU, SIG_DFL);
    }
    ExitCode code = exec_error == ENOENT ? ExitCode::not_found : ExitCode::cannot_execute;
    throw Error(code, "cannot run '{}': {}", spec.argv[0], std::strerror(exec_error));
  }

  int guard_pipe[2];
  if (::pipe2(guard_pipe, O_CLOEXEC) != 0) {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw Error(ExitCode::internal, "pipe failed: {}", std::strerror(errno));
  }
  pid_t guard = ::fork();
  if (guard == 0) {
    ::close(guard_pipe[1]);
    run_guard(guard_pipe[0], pid);
  }
  ::close(guard_pipe[0]);
  if (guard < 0) {
    ::close(guard_pipe[1]);
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw Error(ExitCode::internal, "fork failed: {}", std::strerror(errno));
  }
  return ChildProcess(pid, guard, util::UniqueFd(guard_pipe[1]), take_terminal);
}

ChildProcess::ChildProcess(pid_t pid, pid_t guard, util::UniqueFd guard_pipe, bool owns_terminal)
  : m_pid(pid), m_guard(guard), m_guard_pipe(std::move(guard_pipe)), m_owns_terminal(owns_terminal)
{
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
  : m_pid(std::exchange(other.m_pid, -1)),
    m_guard(std::exchange(other.m_guard, -1)),
    m_guard_pipe(std::move(other.m_guard_pipe)),
    m_owns_terminal(std::exchange(other.m_owns_terminal, false)),
    m_reaped(std::exchange(other.m_reaped, true))
{
}

ChildProcess::~ChildProcess()
{
  if (m_pid > 0 && !m_reaped) {
    ::kill(-m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
  }
  give_back_terminal();
  m_guard_pipe.reset(); // the guard wakes up, finds nothing left to kill, and exits
  if (m_guard > 0) {
    ::waitpid(m_guard, nullptr, 0);
  }
}

void ChildProcess::signal_group(int sig) const noexcept
{
  if (m_pid > 0 && !m_reaped) {
    ::kill(-m_pid, sig);
  }
}

std::optional<int> ChildProcess::try_wait()
{
  if (m_reaped) {
    return std::nullopt;
  }
  siginfo_t info{};
  // Look without reaping, so the group id cannot be reused while we kill the leftovers.
  if (::waitid(P_PID, static_cast<id_t>(m_pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0
      || info.si_pid == 0) {
    return std::nullopt;
  }
  ::kill(-m_pid, SIGKILL);
  int status = 0;
  while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
  }
  m_reaped = true;
  give_back_terminal();
  return shell_status(status);
}

void ChildProcess::give_back_terminal() noexcept
{
  if (m_owns_terminal) {
    m_owns_terminal = false;
    auto previous = ::signal(SIGTTOU, SIG_IGN);
    ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
    ::signal(SIGTTOU, previous);
  }
}

} // namespace dlock::process
