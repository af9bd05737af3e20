#pragma once

#include "commands/context.hpp"
#include "lock/name.hpp"
#include "util/error.hpp"

#include <chrono>
#include <cstdint>
#include <optional>

namespace dlock::commands {

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

// `dlock latch`: --count sets the count-down latch, --down counts it down (1 if none is set),
// --wait returns once it reaches zero (0, or conflict_exit_code when --wait runs out).
int latch(Context& context, const LatchOptions& options);

} // namespace dlock::commands
