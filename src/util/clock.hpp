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

// The real monotonic clock, for code that takes a Clock.
class SteadyClock final : public Clock {
public:
  TimePoint now() const override { return monotonic_now(); }
};

} // namespace dlock::util
