#pragma once

#include "commands/context.hpp"
#include "commands/waiting.hpp"
#include "process/signals.hpp"

#include <functional>
#include <optional>
#include <vector>

namespace dlock::commands {

// The outcome of waiting for a lock.
struct WaitOutcome {
  bool acquired = false;
  std::int64_t fence = 0;
  util::TimePoint sent_at{}; // when the winning request left: the lease runs from here
  // The part of the lease left when the lock was granted, for a store of several nodes
  // (Redlock); nullopt: the whole TTL.
  std::optional<util::Millis> validity{};
  int signal = 0;            // non-zero: interrupted by this signal while waiting
  std::vector<std::int64_t> fences{}; // several keys: each one's fencing token, in their order
  std::string held_by{}; // not acquired: who held the lock at the last attempt (holder_for_log)
};

// Takes the lock, waiting if needed without polling: each failed attempt registers this
// process as a waiter in the same script, then it blocks on a wake list that a release
// pushes to, for no longer than the holder's remaining lease, so a crashed holder is
// taken over as soon as its lease ends. --wait is enforced on the client's own clock, with a
// last attempt at the deadline. Signals end the wait; the store's errors throw.
// overlap, if given, runs once while the first attempt is in flight, so that its work hides
// behind the round trip; if it throws, a lock that attempt took is released before the error
// goes on.
WaitOutcome acquire_with_wait(Context& context, const lock::LockName& name,
                              const std::string& token, util::Millis ttl,
                              const lock::HolderInfo& me, const WaitPolicy& policy,
                              process::SignalFd& signals,
                              const std::function<void()>& overlap = {});

// Takes every one of names (in canonical order) or none: one at a time, without ever waiting
// while holding one, so that holders of overlapping sets can neither deadlock nor keep a
// lease they cannot renew. When a key is held elsewhere, the keys taken so far are released,
// that key is waited for as acquire_with_wait does, and the others are tried again. All keys
// get the same token; sent_at is the earliest lease start, validity the shortest.
WaitOutcome acquire_all_with_wait(Context& context, const std::vector<lock::LockName>& names,
                                  const std::string& token, util::Millis ttl,
                                  const lock::HolderInfo& me, const WaitPolicy& policy,
                                  process::SignalFd& signals,
                                  const std::function<void()>& overlap = {});

// Releases every one of names the token holds, one request each; whether all were held. A
// store that does not answer: the first error, after trying the others.
bool release_all(Context& context, const std::vector<lock::LockName>& names,
                 const std::string& token);

} // namespace dlock::commands
