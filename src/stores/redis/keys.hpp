#pragma once

#include <string>
#include <string_view>

namespace dlock::redis {

// The Redis keys of one lock. All carry the name in a hash tag ("dlock:{name}…") so that
// they share a Redis Cluster slot and one Lua script may touch them all.
struct LockKeys {
  std::string name;   // the user's lock name
  std::string lock;   // prefix{name}: the holder's token, with the lease as its TTL
  std::string fence;  // prefix{name}:fence: fencing counter, kept 7 days past the last use
  std::string holder; // prefix{name}:holder: metadata hash, expires with the lock
  std::string waiters; // prefix{name}:waiters: zset of waiting ids scored by expiry (ms)
  std::string queue;   // prefix{name}:queue: zset of --fair ids scored by arrival
  std::string queue_expiry; // prefix{name}:queue-expiry: zset of --fair ids by expiry (ms)
  std::string wake;    // prefix{name}:wake: list a release pushes to, waking one waiter
  std::string holders; // prefix{name}:holders: zset of --shared/--limit tokens by lease end (ms)
  std::string slots;   // prefix{name}:slots: hash of those holders' records (JSON), by token
  std::string kind;    // prefix{name}:kind: "shared" or "limit:N" while slot holders exist
  std::string writers; // prefix{name}:writers: zset of waiting exclusive ids by expiry (ms)

  std::string fair_wake_prefix; // prefix{name}:wake: + a --fair waiter's id: its own wake list

  // The list a release pushes to for one --fair waiter (declared to the wake script, as
  // Redis Cluster wants every key a script touches to be).
  std::string wake_for(std::string_view waiter_id) const;

  // Keys for a name under a prefix (default "dlock:").
  static LockKeys make(std::string_view prefix, std::string_view name);
};

// The wake list of the --fair waiter waiter_id of the lock whose fair_wake_prefix is given.
std::string fair_wake_list(std::string_view fair_wake_prefix, std::string_view waiter_id);

} // namespace dlock::redis
