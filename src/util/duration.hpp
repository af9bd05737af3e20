#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace dlock::util {

using Millis = std::chrono::milliseconds;

// Parses "250ms", "10s", "1.5m", "1m30s", "2h" or a bare (fractional) number of seconds;
// throws Error(usage) naming the option on anything else, so every flag reports alike.
Millis parse_duration(std::string_view text, std::string_view option_name);

// Renders a duration the way users typed it ("1.5s", "250ms", "2m30s") for messages.
std::string format_duration(Millis duration);

} // namespace dlock::util
