#pragma once

#include "hold/clock.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"

#include <algorithm>

// A clock that moves only when told to, for the pure timing logic (Lease, Watchdog), or when
// what it drives sleeps (hold::Waiter, hold::LeaseKeeper): a sleep runs the handlers of the
// descriptors ready now (a signal), and if none was, jumps to its wake-up time.
class FakeClock final : public dlock::hold::Clock {
public:
  dlock::util::TimePoint now() const override { return m_now; }
  void advance(dlock::util::Millis step) { m_now += step; }
  void set(dlock::util::TimePoint t) { m_now = t; }
  void wait(dlock::util::EventLoop& loop, dlock::util::TimePoint t) override
  {
    ++sleeps;
    loop.wake_at(dlock::util::monotonic_now()); // poll(2) without sleeping
    if (!loop.wait() && t > m_now) {
      m_now = std::min(t, horizon);
    }
  }
  int sleeps = 0; // how many times what it drives slept
  // No sleep goes past this (a test's own stopping point).
  dlock::util::TimePoint horizon = dlock::util::TimePoint::max();

private:
  dlock::util::TimePoint m_now{std::chrono::hours(1000)};
};
