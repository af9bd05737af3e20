#pragma once

#include <chrono>

namespace dlock::util {

using TimePoint = std::chrono::steady_clock::time_point;

// The current monotonic time (CLOCK_MONOTONIC). The lease and watchdog logic never reads it:
// it is given the time, so that tests drive it with a fake clock (tests/unit/fake_clock.hpp).
inline TimePoint monotonic_now() { return std::chrono::steady_clock::now(); }

// The deadline of one request sent now: each request gets the whole timeout (--connect-timeout)
// to itself, so a long series of requests is never cut short by a budget for the whole series.
inline TimePoint deadline_after(std::chrono::milliseconds timeout) { return monotonic_now() + timeout; }

} // namespace dlock::util
