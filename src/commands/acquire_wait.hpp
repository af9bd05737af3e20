#pragma once

#include "lock/client.hpp"
#include "process/signals.hpp"

#include <optional>

namespace dlock::commands {

// How long and how to wait for a held lock.
struct WaitPolicy {
  bool no_wait = false;
  std::optional<util::Millis> wait; // nullopt: forever
  util::Millis request_timeout{2000};
  bool report_holder = false;       // say who holds it (terminal or -v)
};

// The outcome of waiting for a lock.
struct WaitOutcome {
  bool acquired = false;
  std::int64_t fence = 0;
  util::TimePoint sent_at{}; // when the winning request left: the lease runs from here
  int signal = 0;            // non-zero: interrupted by this signal while waiting
};

// Tries to take the lock, retrying with jittered, capped backoff until --wait runs out (a last
// attempt is made at the deadline itself). Signals end the wait; Redis errors throw.
WaitOutcome acquire_with_wait(lock::LockClient& client, const std::string& token,
                              util::Millis ttl, const lock::HolderInfo& me,
                              const WaitPolicy& policy, process::SignalFd& signals);

} // namespace dlock::commands
