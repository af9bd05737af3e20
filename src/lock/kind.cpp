#include "lock/kind.hpp"

#include <fmt/format.h>

#include <charconv>

namespace dlock::lock {

std::string LockKind::code() const
{
  switch (mode) {
  case Mode::shared:
    return "shared";
  case Mode::limit:
    return fmt::format("limit:{}", limit);
  case Mode::exclusive:
    break;
  }
  return "exclusive";
}

std::optional<LockKind> LockKind::from_code(std::string_view code)
{
  if (code == "exclusive") {
    return exclusive();
  }
  if (code == "shared") {
    return shared();
  }
  constexpr std::string_view limit_prefix = "limit:";
  if (code.starts_with(limit_prefix)) {
    int n = 0;
    std::string_view digits = code.substr(limit_prefix.size());
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (error == std::errc() && end == digits.data() + digits.size() && n >= 2) {
      return LockKind{Mode::limit, n};
    }
  }
  return std::nullopt;
}

std::string LockKind::describe() const
{
  switch (mode) {
  case Mode::shared:
    return "a shared lock (--shared)";
  case Mode::limit:
    return fmt::format("a semaphore of {} (--limit {})", limit, limit);
  case Mode::exclusive:
    break;
  }
  return "an exclusive lock";
}

} // namespace dlock::lock
