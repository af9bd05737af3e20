#include "stores/redis/keys.hpp"

#include <fmt/format.h>

namespace dlock::redis {

LockKeys LockKeys::make(std::string_view prefix, std::string_view name)
{
  std::string base = fmt::format("{}{{{}}}", prefix, name);
  LockKeys keys;
  keys.name = name;
  keys.lock = base;
  keys.fence = base + ":fence";
  keys.holder = base + ":holder";
  keys.waiters = base + ":waiters";
  keys.queue = base + ":queue";
  keys.queue_expiry = base + ":queue-expiry";
  keys.wake = base + ":wake";
  keys.holders = base + ":holders";
  keys.slots = base + ":slots";
  keys.kind = base + ":kind";
  keys.writers = base + ":writers";
  keys.newest = base + ":newest";
  keys.watchers = base + ":watchers";
  keys.watch = base + ":watch";
  keys.freed = base + ":freed";
  keys.leader_watchers = base + ":leader:watchers";
  keys.leader_wake = base + ":leader:wake";
  keys.barrier = base + ":barrier";
  keys.arrivals = base + ":barrier:arrivals";
  keys.latch = base + ":latch";
  keys.latch_waiters = base + ":latch:waiters";
  keys.latch_wake = base + ":latch:wake";
  keys.history = base + ":history";
  keys.fair_wake_prefix = base + ":wake:";
  keys.barrier_wake_prefix = base + ":barrier:";
  return keys;
}

std::string LockKeys::wake_for(std::string_view waiter_id) const
{
  return fair_wake_list(fair_wake_prefix, waiter_id);
}

std::string LockKeys::barrier_wake(std::int64_t generation) const
{
  return barrier_wake_list(barrier_wake_prefix, generation);
}

std::string fair_wake_list(std::string_view fair_wake_prefix, std::string_view waiter_id)
{
  return std::string(fair_wake_prefix).append(waiter_id);
}

std::string barrier_wake_list(std::string_view barrier_wake_prefix, std::int64_t generation)
{
  return std::string(barrier_wake_prefix).append(std::to_string(generation));
}

} // namespace dlock::redis
