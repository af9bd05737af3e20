#pragma once

#include "util/clock.hpp"
#include "util/event_loop.hpp"

namespace dlock::hold {

// The time of the waiter and the lease keeper, and their one way to sleep: the monotonic clock
// and an EventLoop in dlock, a clock that jumps to each wake-up in the unit tests
// (tests/unit/fake_clock.hpp), so that waiting and renewing are tested without sleeping.
class Clock {
public:
  virtual ~Clock() = default;
  // The current time.
  virtual util::TimePoint now() const = 0;
  // Sleeps until a descriptor loop watches is ready (running its handler) or until t.
  virtual void wait(util::EventLoop& loop, util::TimePoint t) = 0;
};

// CLOCK_MONOTONIC and poll(2).
Clock& system_clock();

} // namespace dlock::hold
