#include "lock/name.hpp"

#include "util/error.hpp"

namespace dlock::lock {

LockName LockName::parse(std::string_view text)
{
  if (text.empty()) {
    throw Error(ExitCode::usage, "the lock key must not be empty");
  }
  if (text.size() > 1024) {
    throw Error(ExitCode::usage, "the lock key is {} bytes long; the limit is 1024", text.size());
  }
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      throw Error(ExitCode::usage, "the lock key must not contain control characters");
    }
  }
  return LockName(std::string(text));
}

} // namespace dlock::lock
