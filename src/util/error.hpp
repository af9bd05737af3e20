#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dlock {

// Exit statuses fixed by CONTRACT.md; every failure path ends in exactly one of them.
enum class ExitCode : int {
  ok = 0,
  not_held = 1,
  usage = 64,
  unavailable = 69,
  internal = 70,
  conflict = 75,
  lost = 76,
  auth = 77,
  config = 78,
  max_hold = 124,
  cannot_execute = 126,
  not_found = 127,
};

// A failure that knows the exit status dlock must end with; caught once, in run_main.
class Error : public std::runtime_error {
public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), m_code(code) {}

  template<typename... Args>
  Error(ExitCode code, fmt::format_string<Args...> format, Args&&... args)
    : std::runtime_error(fmt::format(format, std::forward<Args>(args)...)), m_code(code)
  {
  }

  // The exit status this failure maps to.
  ExitCode code() const noexcept { return m_code; }

private:
  ExitCode m_code;
};

} // namespace dlock
