#include "util/duration.hpp"

#include "util/error.hpp"

#include <cmath>

namespace dlock::util {

namespace {

// Milliseconds per unit, or 0 for an unknown unit.
double unit_millis(std::string_view unit)
{
  if (unit == "ms") {
    return 1;
  }
  if (unit == "s" || unit.empty()) {
    return 1000;
  }
  if (unit == "m") {
    return 60'000;
  }
  if (unit == "h") {
    return 3'600'000;
  }
  if (unit == "d") {
    return 86'400'000;
  }
  return 0;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

} // namespace

Millis parse_duration(std::string_view text, std::string_view option_name)
{
  auto bad = [&] {
    return Error(ExitCode::usage,
                 "invalid duration '{}' for {}: use forms like 250ms, 10s, 1.5m, 1m30s, 2h, 1d",
                 text, option_name);
  };
  auto too_large = [&] {
    return Error(ExitCode::usage, "duration '{}' for {} is too large: at most {}", text,
                 option_name, format_duration(max_duration));
  };
  if (text.empty()) {
    throw bad();
  }
  double total = 0;
  std::size_t pos = 0;
  bool bare_number = true;
  while (pos < text.size()) {
    std::size_t start = pos;
    bool seen_dot = false;
    while (pos < text.size() && (is_digit(text[pos]) || (text[pos] == '.' && !seen_dot))) {
      seen_dot = seen_dot || text[pos] == '.';
      ++pos;
    }
    std::string_view number = text.substr(start, pos - start);
    if (number.empty() || number == ".") {
      throw bad();
    }
    std::size_t unit_start = pos;
    while (pos < text.size() && text[pos] >= 'a' && text[pos] <= 'z') {
      ++pos;
    }
    std::string_view unit = text.substr(unit_start, pos - unit_start);
    if (unit.empty() && pos < text.size()) {
      throw bad();
    }
    if (unit.empty() && !bare_number) {
      throw bad(); // "1m30" is ambiguous; require the unit
    }
    double per_unit = unit_millis(unit);
    if (per_unit == 0) {
      throw bad();
    }
    bare_number = bare_number && unit.empty();
    // Digits and at most one dot, read here: the C++ library's parser of doubles would bring
    // libm into every dlock process (0.3 MB). Too many digits end as infinity: too large below.
    double value = 0;
    double scale = 1;
    bool fraction = false;
    for (char c : number) {
      if (c == '.') {
        fraction = true;
      } else if (fraction) {
        scale /= 10;
        value += (c - '0') * scale;
      } else {
        value = value * 10 + (c - '0');
      }
    }
    total += value * per_unit;
  }
  if (!std::isfinite(total) || total > static_cast<double>(max_duration.count())) {
    throw too_large();
  }
  // Rounded half up (total >= 0), without libm's llround.
  auto whole = static_cast<long long>(total);
  return Millis(total - static_cast<double>(whole) >= 0.5 ? whole + 1 : whole);
}

std::string format_duration(Millis duration)
{
  long long ms = duration.count();
  if (ms < 1000) {
    return fmt::format("{}ms", ms);
  }
  if (ms < 60'000) {
    if (ms % 1000 == 0) {
      return fmt::format("{}s", ms / 1000);
    }
    return fmt::format("{:.3g}s", static_cast<double>(ms) / 1000);
  }
  long long total_s = ms / 1000;
  if (total_s < 3600) {
    return total_s % 60 == 0 ? fmt::format("{}m", total_s / 60)
                             : fmt::format("{}m{}s", total_s / 60, total_s % 60);
  }
  if (total_s < 86'400) {
    return (total_s % 3600) / 60 == 0
             ? fmt::format("{}h", total_s / 3600)
             : fmt::format("{}h{}m", total_s / 3600, (total_s % 3600) / 60);
  }
  return (total_s % 86'400) / 3600 == 0
           ? fmt::format("{}d", total_s / 86'400)
           : fmt::format("{}d{}h", total_s / 86'400, (total_s % 86'400) / 3600);
}

} // namespace dlock::util
