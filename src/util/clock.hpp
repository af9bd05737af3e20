#pragma once

#include <chrono>
#include <cstdint>

namespace dlock::util {

using TimePoint = std::chrono::steady_clock::time_point;

// The current monotonic time (CLOCK_MONOTONIC). The lease and watchdog logic never reads it:
// it is given the time, so that tests drive it with a fake clock (tests/unit/fake_clock.hpp).
inline TimePoint monotonic_now() { return std::chrono::steady_clock::now(); }

// The deadline of one request sent now: each request gets the whole timeout (--connect-timeout)
// to itself, so a long series of requests is never cut short by a budget for the whole series.
inline TimePoint deadline_after(std::chrono::milliseconds timeout)
{
  return monotonic_now() + timeout;
}

// The wall clock in ms since the Unix epoch, for what a store records or reports (a holder's
// acquired_ms, a status's server time) where the store has no clock of its own to ask.
inline std::int64_t unix_ms()
{
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}
// The same in µs.
inline std::int64_t unix_us()
{
  return std::chrono::duration_cast<std::chrono::microseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

} // namespace dlock::util
