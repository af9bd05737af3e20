#pragma once

#include "commands/context.hpp"
#include "lock/name.hpp"
#include "util/error.hpp"

#include <cstdint>
#include <optional>

namespace dlock::commands {

// `dlock barrier --key K --parties N [--wait D] [-E N]`
struct BarrierOptions {
  lock::LockName key;
  std::int64_t parties = 1;
  std::optional<util::Millis> wait{};
  int conflict_exit_code = static_cast<int>(ExitCode::conflict);
};

// `dlock barrier`: arrives, and returns once N parties have arrived, all together; the next N
// arrivals form the next barrier. 0, or conflict_exit_code when --wait runs out (the arrival
// is withdrawn, unless the barrier tripped first: then 0). 64 if a barrier of another N is in
// progress.
int barrier(Context& context, const BarrierOptions& options);

} // namespace dlock::commands
