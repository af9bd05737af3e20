#include "util/event_loop.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dlock::util {

void EventLoop::watch(int fd, short events, Handler handler)
{
  if (fd < 0 || events == 0) {
    return;
  }
  m_fds.push_back(pollfd{fd, events, 0});
  m_handlers.push_back(std::move(handler));
}

void EventLoop::wake_at(TimePoint t) { m_wake = std::min(m_wake, t); }

bool EventLoop::wait()
{
  // Rounded up, so that a wake-up never comes before its time and spins.
  auto left = std::chrono::ceil<std::chrono::milliseconds>(m_wake - monotonic_now());
  int timeout = static_cast<int>(std::clamp(left, std::chrono::milliseconds(0), max_sleep).count());
  int ready = ::poll(m_fds.data(), m_fds.size(), timeout);
  int error = errno;
  std::vector<pollfd> fds = std::move(m_fds);
  std::vector<Handler> handlers = std::move(m_handlers);
  m_fds.clear();
  m_handlers.clear();
  m_wake = TimePoint::max();
  if (ready < 0) {
    if (error == EINTR) {
      return false;
    }
    throw Error(ExitCode::internal, "poll failed: {}", std::strerror(error));
  }
  bool ran = false;
  for (std::size_t i = 0; i < fds.size() && ready > 0; ++i) {
    if (fds[i].revents != 0) {
      handlers[i](fds[i].revents);
      ran = true;
    }
  }
  return ran;
}

bool run_until(TimePoint deadline, const std::function<bool()>& done,
               const std::function<void(EventLoop&)>& watch)
{
  while (!done()) {
    if (monotonic_now() >= deadline) {
      return false;
    }
    EventLoop loop;
    watch(loop);
    loop.wake_at(deadline);
    loop.wait();
  }
  return true;
}

} // namespace dlock::util
