#pragma once

#include "hold/waiter.hpp"
#include "lock/kind.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "lock/store.hpp"
#include "util/error.hpp"

#include <optional>
#include <vector>

namespace dlock::commands {

// How to take a lock, validated: what `run` and `acquire` share (their --key, --shared,
// --limit, --ttl, --wait, --no-wait, --fair, -E, --wait-replicas and the cron and CI policies
// --min-hold, --lock-delay, --replace, --supersede, --note), written once; both
// option structs derive from it, so its fields read as their own.
struct LockRequestOptions {
  std::vector<lock::LockName> keys{}; // one or more, in canonical order
  lock::LockKind kind{};              // exclusive, --shared, --limit N
  util::Millis ttl = lock::default_ttl;
  bool ttl_given = false; // --ttl (or the config file) said it: a store may not change it
  std::optional<util::Millis> wait{}; // nullopt: wait forever
  bool no_wait = false;
  bool fair = false; // first come, first served among waiters
  int conflict_exit_code = static_cast<int>(ExitCode::conflict);
  lock::ReplicaAck replicas{}; // --wait-replicas: the lock and each renewal count once they have it
  lock::LockPolicy policy{};   // --min-hold, --lock-delay, --replace, --supersede
  std::string note{};          // --note: printable, at most lock::max_note_chars characters
  // elect --value: what the leader proclaims (printable, at most max_holder_field_bytes); set,
  // the holder is an election's candidate (lock::AcquireRequest::holder). Empty for run.
  std::string value{};

  // How the waiter waits for these options (-q, -v and the terminal decide what it says).
  hold::WaitPolicy wait_policy(util::Millis request_timeout) const;
  // An attempt of holder (its --note set here) under token, with these options' policies.
  lock::AcquireRequest acquire_request(std::string token, lock::HolderInfo holder) const;
};

} // namespace dlock::commands
