#pragma once

#include "util/clock.hpp"

#include <poll.h>

#include <functional>
#include <vector>

namespace dlock::util {

// The one place dlock sleeps: on descriptors (sockets, the guard's pipe, a signalfd) and a
// deadline. Each round, callers say what to watch and when to wake up, then wait() once.
// One rule for all of them: EINTR is a wake-up with nothing ready, a poll failure is an
// internal error, and no sleep is longer than max_sleep, so a missed deadline heals.
class EventLoop {
public:
  // Called with poll's revents for a descriptor that became ready.
  using Handler = std::function<void(short revents)>;

  // The longest single sleep, whatever the deadlines.
  static constexpr std::chrono::milliseconds max_sleep{60'000};

  // Watches fd for events during the next wait() (ignored when fd < 0 or events is 0).
  void watch(int fd, short events, Handler handler);
  // The next wait() returns no later than t.
  void wake_at(TimePoint t);
  // Sleeps until a watched descriptor is ready or the earliest wake_at() time, then runs the
  // handlers of the ready descriptors in the order they were watched. Every watch and wake-up
  // time is forgotten afterwards. Returns whether any handler ran.
  bool wait();

private:
  std::vector<pollfd> m_fds;
  std::vector<Handler> m_handlers;
  TimePoint m_wake = TimePoint::max();
};

// Blocks until done() holds (true) or deadline passes first (false), each round waiting in a
// fresh EventLoop that watch fills: the one blocking wait of a store on its own descriptors
// (a status, a list, one call), whatever the store.
bool run_until(TimePoint deadline, const std::function<bool()>& done,
               const std::function<void(EventLoop&)>& watch);

} // namespace dlock::util
