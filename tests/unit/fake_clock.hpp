#pragma once

#include "util/clock.hpp"
#include "util/duration.hpp"

// A clock that moves only when told to, for the pure timing logic (Lease, Watchdog).
class FakeClock {
public:
  dlock::util::TimePoint now() const { return m_now; }
  void advance(dlock::util::Millis step) { m_now += step; }
  void set(dlock::util::TimePoint t) { m_now = t; }

private:
  dlock::util::TimePoint m_now{std::chrono::hours(1000)};
};
