#pragma once

#include "commands/context.hpp"
#include "commands/lock_request.hpp"
#include "lock/kind.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "util/error.hpp"

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dlock::commands {

// `acquire --keep`: a detached holder renews the lease until the lock is released, max_hold
// runs out, or the process it keeps the lock for exits.
struct KeepOptions {
  std::optional<pid_t> while_pid{}; // nullopt: the calling script (see keep.hpp)
  std::optional<util::Millis> max_hold{};
  int on_lost_signal = 0; // sent to that process if the lease is lost
  lock::LockKind kind{};  // how the lock is held (acquire's --shared, --limit)
};

// `dlock acquire --key K... --ttl D [--wait D | --no-wait] [--fair | --shared | --limit N]
// [--json]`
struct AcquireOptions : LockRequestOptions {
  bool json = false;
  std::optional<KeepOptions> keep{}; // --keep
};

// `dlock acquire`: takes the lock for a job that spans several steps and prints the token.
int acquire(Context& context, const AcquireOptions& options);

} // namespace dlock::commands
