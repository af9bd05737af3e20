#include "process/signals.hpp"

#include "util/error.hpp"

#include <sys/signalfd.h>

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

} // namespace dlock::process
