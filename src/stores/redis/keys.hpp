#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dlock::redis {

// The Redis keys of one lock. All carry the name in a hash tag ("dlock:{name}…") so that
// they share a Redis Cluster slot and one Lua script may touch them all.
struct LockKeys {
  std::string name;         // the user's lock name
  std::string lock;         // prefix{name}: the holder's token, with the lease as its TTL
  std::string fence;        // prefix{name}:fence: fencing counter, kept 7 days past the last use
  std::string holder;       // prefix{name}:holder: metadata hash, expires with the lock
  std::string waiters;      // prefix{name}:waiters: zset of waiting ids scored by expiry (ms)
  std::string queue;        // prefix{name}:queue: zset of --fair ids scored by arrival
  std::string queue_expiry; // prefix{name}:queue-expiry: zset of --fair ids by expiry (ms)
  std::string wake;         // prefix{name}:wake: list a release pushes to, waking one waiter
  std::string holders; // prefix{name}:holders: zset of --shared/--limit tokens by lease end (ms)
  std::string slots;   // prefix{name}:slots: hash of those holders' records (JSON), by token
  std::string kind;    // prefix{name}:kind: "shared" or "limit:N" while slot holders exist
  std::string writers; // prefix{name}:writers: zset of waiting exclusive ids by expiry (ms)
  // --supersede: prefix{name}:newest: hash of the newest --supersede waiter (id, its record),
  // expiring like its registration
  std::string newest;
  // dlock wait
  std::string watchers; // prefix{name}:watchers: zset of `dlock wait` ids by expiry (ms)
  std::string watch;    // prefix{name}:watch: list a release that frees the lock pushes to,
                        // once per watcher
  std::string freed;    // prefix{name}:freed: when the lock was last taken from free while
                        // watched (server µs), so a watcher counts a hand-over as freed
  // dlock leader --watch
  std::string leader_watchers; // prefix{name}:leader:watchers: zset of watcher ids by expiry (ms)
  std::string leader_wake;     // prefix{name}:leader:wake: list a release or an acquisition from
                               // free pushes to, once per watcher
  // dlock barrier
  std::string barrier;  // prefix{name}:barrier: hash of the current generation and parties
  std::string arrivals; // prefix{name}:barrier:arrivals: zset of arrived ids by expiry (ms)
  // dlock latch
  std::string latch;         // prefix{name}:latch: the count left
  std::string latch_waiters; // prefix{name}:latch:waiters: zset of waiting ids by expiry (ms)
  std::string latch_wake;    // prefix{name}:latch:wake: list the count's last step pushes to
  // dlock history: prefix{name}:history: stream of the lock's events (field e: the text),
  // capped and expiring like the fence (record.lua)
  std::string history;

  std::string fair_wake_prefix;    // prefix{name}:wake: + a --fair waiter's id: its own wake list
  std::string barrier_wake_prefix; // prefix{name}:barrier: + a generation: its parties' wake list

  // The list a release pushes to for one --fair waiter (declared to the wake script, as
  // Redis Cluster wants every key a script touches to be).
  std::string wake_for(std::string_view waiter_id) const;
  // The list the last party of a barrier generation pushes to, waking the others (declared
  // to the wake script, like wake_for).
  std::string barrier_wake(std::int64_t generation) const;

  // Keys for a name under a prefix (default "dlock:").
  static LockKeys make(std::string_view prefix, std::string_view name);
};

// The wake list of the --fair waiter waiter_id of the lock whose fair_wake_prefix is given.
std::string fair_wake_list(std::string_view fair_wake_prefix, std::string_view waiter_id);

// The wake list of a barrier's generation, for the lock whose barrier_wake_prefix is given.
std::string barrier_wake_list(std::string_view barrier_wake_prefix, std::int64_t generation);

} // namespace dlock::redis
