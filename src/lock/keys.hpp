#pragma once

#include <string>
#include <string_view>

namespace dlock::lock {

// The Redis keys of one lock. All carry the name in a hash tag ("dlock:{name}…") so that
// they share a Redis Cluster slot and one Lua script may touch them all.
struct LockKeys {
  std::string name;   // the user's lock name
  std::string lock;   // prefix{name}: the holder's token, with the lease as its TTL
  std::string fence;  // prefix{name}:fence: fencing counter, never expires
  std::string holder; // prefix{name}:holder: metadata hash, expires with the lock

  // Keys for a name under a prefix (default "dlock:").
  static LockKeys make(std::string_view prefix, std::string_view name);
};

// Throws Error(usage) unless name is 1 to 1024 bytes without control characters.
void validate_lock_name(std::string_view name);

} // namespace dlock::lock
