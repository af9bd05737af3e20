#pragma once

#include <chrono>

namespace dlock::util {

using TimePoint = std::chrono::steady_clock::time_point;

// Monotonic time source; an interface so that lease timing is unit-tested without sleeping.
class Clock {
public:
  virtual ~Clock() = default;
  // The current monotonic time.
  virtual TimePoint now() const = 0;
};

// The current monotonic time (CLOCK_MONOTONIC), for deadlines outside the lease logic.
inline TimePoint monotonic_now() { return std::chrono::steady_clock::now(); }

// The deadline of one request sent now: each request gets the whole timeout (--connect-timeout)
// to itself, so a long series of requests is never cut short by a budget for the whole series.
inline TimePoint deadline_after(std::chrono::milliseconds timeout) { return monotonic_now() + timeout; }

// The real monotonic clock, for code that takes a Clock.
class SteadyClock final : public Clock {
public:
  TimePoint now() const override { return monotonic_now(); }
};

} // namespace dlock::util
