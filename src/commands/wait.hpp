#pragma once

#include "commands/context.hpp"
#include "lock/name.hpp"
#include "util/error.hpp"

#include <optional>

namespace dlock::commands {

// `dlock wait --key K [--wait D] [-E N]`
struct WaitFreeOptions {
  lock::LockName key;
  std::optional<util::Millis> wait{}; // nullopt: forever
  int conflict_exit_code = static_cast<int>(ExitCode::conflict);
};

// `dlock wait`: returns once the lock is free, or was freed since this began (a lock waiter
// may take it at once); takes nothing. 0, or conflict_exit_code when --wait runs out.
int wait_until_free(Context& context, const WaitFreeOptions& options);

} // namespace dlock::commands
