#pragma once

#include "commands/context.hpp"
#include "commands/run.hpp"

namespace dlock::commands {

// Options of `dlock elect`: run's, for one exclusive key taken first come, first served, with
// the leader's --value (empty: user@host pid N) and whether to campaign again after a term.
struct ElectOptions : RunOptions {
  bool keep_campaigning = false;
};

// `dlock elect`: campaigns (a FIFO queue of candidates), runs the command while leader (each
// term a new fencing token), stops it before the lease can end if leadership is lost (76),
// passes its exit status through; with keep_campaigning, campaigns again until a signal.
int elect(Context& context, const ElectOptions& options);

} // namespace dlock::commands
