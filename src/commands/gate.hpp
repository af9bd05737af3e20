#pragma once

#include "commands/context.hpp"
#include "hold/waiter.hpp"

#include <optional>
#include <string>

namespace dlock::commands {

// What `wait`, `barrier` and `latch --wait` share: coordinating jobs without holding anything.
// Each waits at its gate as a lock waiter waits (hold::Waiter: woken by what opens it, never
// polling; --wait; signals; an outage ridden out), on registrations and wake-up lists of its
// own. They need a store that keeps one state (Feature::coordinate: not Redlock).

// Refuses a store that cannot coordinate (Feature::coordinate), before any I/O: the one place
// wait, barrier and latch ask for the store's coordination.
lock::Coordination& require_coordination(Context& context);

// Waits at gate until it opens (0; with -v, says `opened`), --wait runs out
// (conflict_exit_code), or a signal (128+N; dies of SIGINT and SIGQUIT as acquire's wait does).
int wait_at_gate(Context& context, const lock::LockName& name, const hold::Gate& gate,
                 std::optional<util::Millis> wait, int conflict_exit_code,
                 const std::string& opened);

} // namespace dlock::commands
