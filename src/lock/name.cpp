#include "lock/name.hpp"

#include "util/error.hpp"

#include <algorithm>

namespace dlock::lock {

LockName LockName::parse(std::string_view text)
{
  if (text.empty()) {
    throw Error(ExitCode::usage, "the lock key must not be empty");
  }
  if (text.size() > max_name_bytes) {
    throw Error(ExitCode::usage, "the lock key is {} bytes long; the limit is {}", text.size(),
                max_name_bytes);
  }
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      throw Error(ExitCode::usage, "the lock key must not contain control characters");
    }
  }
  return LockName(std::string(text));
}

std::vector<LockName> canonical_order(std::vector<LockName> names)
{
  auto bytewise = [](const LockName& a, const LockName& b) { return a.str() < b.str(); };
  std::sort(names.begin(), names.end(), bytewise);
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::string join_names(const std::vector<LockName>& names)
{
  std::string text;
  for (const LockName& name : names) {
    if (!text.empty()) {
      text.push_back(' ');
    }
    text += name.str();
  }
  return text;
}

} // namespace dlock::lock
