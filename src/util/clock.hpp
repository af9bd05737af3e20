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

// The real monotonic clock (CLOCK_MONOTONIC via steady_clock).
class SteadyClock final : public Clock {
public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
};

} // namespace dlock::util
