#pragma once

#include "commands/context.hpp"
#include "lock/name.hpp"

namespace dlock::commands {

// `dlock leader KEY [--json] [--watch]`
struct LeaderOptions {
  lock::LockName key;
  bool json = false;
  bool watch = false; // a line (or document) per change of leader, until a signal
};

// `dlock leader`: who leads the election KEY (its value, holder, since, term); exit 0 when
// someone leads, 1 when nobody does. With watch, prints the leader now and again at each change
// the store wakes it for (never polling), until a signal ends it.
int leader(Context& context, const LeaderOptions& options);

} // namespace dlock::commands
