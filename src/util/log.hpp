#pragma once

#include <fmt/format.h>

#include <string_view>

namespace dlock::util {

// How much dlock says on stderr: -q, default, -v.
enum class Verbosity { quiet, normal, verbose };

// Set once from the command line; logging is the only process-wide state dlock keeps.
void set_verbosity(Verbosity verbosity);
Verbosity verbosity();

// Writes one "dlock: ..." line to stderr in a single write(2), safe to interleave.
void write_line(std::string_view message);

// An error that ends dlock; printed even with -q.
template<typename... Args> void log_error(fmt::format_string<Args...> format, Args&&... args)
{
  write_line(fmt::format(format, std::forward<Args>(args)...));
}

// Something the user should know about; silenced by -q.
template<typename... Args> void log_warning(fmt::format_string<Args...> format, Args&&... args)
{
  if (verbosity() != Verbosity::quiet) {
    write_line(fmt::format(format, std::forward<Args>(args)...));
  }
}

// Progress details shown with -v only.
template<typename... Args> void log_verbose(fmt::format_string<Args...> format, Args&&... args)
{
  if (verbosity() == Verbosity::verbose) {
    write_line(fmt::format(format, std::forward<Args>(args)...));
  }
}

} // namespace dlock::util
