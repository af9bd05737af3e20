#pragma once

#include "lock/kind.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "util/error.hpp"

#include <optional>
#include <vector>

namespace dlock::commands {

// How to take a lock, validated: what `run` and `acquire` share (their --key, --shared,
// --limit, --ttl, --wait, --no-wait, --fair, -E and --wait-replicas), written once; both
// option structs derive from it, so its fields read as their own.
struct LockRequestOptions {
  std::vector<lock::LockName> keys{}; // one or more, in canonical order
  lock::LockKind kind{};              // exclusive, --shared, --limit N
  util::Millis ttl = lock::default_ttl;
  std::optional<util::Millis> wait{}; // nullopt: wait forever
  bool no_wait = false;
  bool fair = false; // first come, first served among waiters
  int conflict_exit_code = static_cast<int>(ExitCode::conflict);
  lock::ReplicaAck replicas{}; // --wait-replicas: the lock and each renewal count once they have it
};

} // namespace dlock::commands
