#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace dlock::util {

using Millis = std::chrono::milliseconds;

// The longest duration dlock accepts (100 years): added to a steady_clock time point in
// nanoseconds (which overflows after 292 years) or sent to Redis as PX, it can never overflow.
inline constexpr Millis max_duration = std::chrono::days(36'500);

// Parses "250ms", "10s", "1.5m", "1m30s", "2h", "1d" or a bare (fractional) number of seconds,
// at most max_duration; throws Error(usage) naming the option on anything else (the empty
// string too), so every flag reports alike.
Millis parse_duration(std::string_view text, std::string_view option_name);

// Renders a duration the way users typed it ("1.5s", "250ms", "2m30s", "1d2h") for messages.
std::string format_duration(Millis duration);

} // namespace dlock::util
