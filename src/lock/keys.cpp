#include "lock/keys.hpp"

#include "util/error.hpp"

namespace dlock::lock {

LockKeys LockKeys::make(std::string_view prefix, std::string_view name)
{
  std::string base = fmt::format("{}{{{}}}", prefix, name);
  return LockKeys{std::string(name), base,          base + ":fence",
                  base + ":holder",   base + ":waiters", base + ":queue",
                  base + ":queue-expiry", base + ":wake"};
}

std::string LockKeys::wake_for(std::string_view waiter_id) const
{
  return fmt::format("{}:wake:{}", lock, waiter_id);
}

void validate_lock_name(std::string_view name)
{
  if (name.empty()) {
    throw Error(ExitCode::usage, "the lock key must not be empty");
  }
  if (name.size() > 1024) {
    throw Error(ExitCode::usage, "the lock key is {} bytes long; the limit is 1024", name.size());
  }
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) {
      throw Error(ExitCode::usage, "the lock key must not contain control characters");
    }
  }
}

} // namespace dlock::lock
