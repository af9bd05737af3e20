#include "process/signals.hpp"

#include "util/error.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dlock::process {

SignalFd::SignalFd(std::initializer_list<int> signals)
{
  sigset_t set;
  sigemptyset(&set);
  for (int signal : signals) {
    sigaddset(&set, signal);
  }
  if (::sigprocmask(SIG_BLOCK, &set, &m_original) != 0) {
    throw Error(ExitCode::internal, "sigprocmask failed: {}", std::strerror(errno));
  }
  m_fd.reset(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!m_fd) {
    int saved = errno;
    ::sigprocmask(SIG_SETMASK, &m_original, nullptr);
    throw Error(ExitCode::internal, "signalfd failed: {}", std::strerror(saved));
  }
}

SignalFd::~SignalFd() { ::sigprocmask(SIG_SETMASK, &m_original, nullptr); }

std::optional<int> SignalFd::read()
{
  signalfd_siginfo info{};
  while (true) {
    ssize_t n = ::read(m_fd.get(), &info, sizeof info);
    if (n == static_cast<ssize_t>(sizeof info)) {
      return static_cast<int>(info.ssi_signo);
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    return std::nullopt;
  }
}

bool job_control(pid_t also_group) noexcept
{
  int tty = ::open("/dev/tty", O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (tty < 0) {
    return false;
  }
  pid_t foreground = ::tcgetpgrp(tty);
  ::close(tty);
  return foreground > 0 && (foreground == ::getpgrp() || foreground == also_group);
}

void stop_like(int sig) noexcept
{
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigset_t previous;
  ::sigprocmask(SIG_UNBLOCK, &set, &previous);
  if (sig == SIGSTOP) {
    ::raise(SIGSTOP);
  } else {
    auto disposition = ::signal(sig, SIG_DFL);
    ::kill(0, sig); // delivered to dlock before kill returns: it stops here
    ::signal(sig, disposition);
  }
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
}

void die_of_signal(int sig, bool to_group) noexcept
{
  if (sig == SIGQUIT) {
    rlimit none{0, 0};
    ::setrlimit(RLIMIT_CORE, &none); // dlock itself did nothing wrong: no core file
  }
  ::signal(sig, SIG_DFL);
  ::kill(to_group ? 0 : ::getpid(), sig);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::_exit(128 + sig); // only if the signal could not end dlock
}

} // namespace dlock::process
