#pragma once

#include "commands/context.hpp"
#include "lock/name.hpp"
#include "util/error.hpp"

#include <chrono>
#include <cstdint>
#include <optional>

namespace dlock::commands {

// Coordinating jobs across machines without holding anything: waiting for a lock to be free,
// a barrier of N parties, a count-down latch. Each waits the way a lock waiter does (woken by
// what opens its way, never polling; --wait; signals; an outage ridden out), on registrations
// and wake-up lists of its own, so that none takes a wake-up meant for a lock waiter. They
// need a store that keeps one state (Store::coordinates(): not Redlock).

// `dlock wait --key K [--wait D] [-E N]`
struct WaitFreeOptions {
  lock::LockName key;
  std::optional<util::Millis> wait{}; // nullopt: forever
  int conflict_exit_code = static_cast<int>(ExitCode::conflict);
};

// `dlock barrier --key K --parties N [--wait D] [-E N]`
struct BarrierOptions {
  lock::LockName key;
  std::int64_t parties = 1;
  std::optional<util::Millis> wait{};
  int conflict_exit_code = static_cast<int>(ExitCode::conflict);
};

// `dlock latch --key K (--count N [--expire D] | --down | --wait [D]) [--json]`
struct LatchOptions {
  enum class Action { count, down, wait };
  lock::LockName key;
  Action action = Action::wait;
  std::int64_t count = 1;                       // --count N
  util::Millis expire = std::chrono::hours(24); // --expire D, with --count
  std::optional<util::Millis> wait{};           // --wait D; nullopt: forever
  int conflict_exit_code = static_cast<int>(ExitCode::conflict);
  bool json = false; // --count, --down: print the count as JSON
};

// `dlock wait`: returns once the lock is free, or was freed since this began (a lock waiter
// may take it at once); takes nothing. 0, or conflict_exit_code when --wait runs out.
int wait_until_free(Context& context, const WaitFreeOptions& options);

// `dlock barrier`: arrives, and returns once N parties have arrived, all together; the next N
// arrivals form the next barrier. 0, or conflict_exit_code when --wait runs out (the arrival
// is withdrawn, unless the barrier tripped first: then 0). 64 if a barrier of another N is in
// progress.
int barrier(Context& context, const BarrierOptions& options);

// `dlock latch`: --count sets the count-down latch, --down counts it down (1 if none is set),
// --wait returns once it reaches zero (0, or conflict_exit_code when --wait runs out).
int latch(Context& context, const LatchOptions& options);

} // namespace dlock::commands
