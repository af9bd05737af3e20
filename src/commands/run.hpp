#pragma once

#include "cli/options.hpp"

namespace dlock::commands {

// `dlock run`: takes the lock, runs the command under a renewed lease, stops it if the lease
// is lost or cannot be confirmed, releases the lock on every path; returns the exit status.
int run(const cli::GlobalOptions& global, const cli::RunOptions& options);

} // namespace dlock::commands
