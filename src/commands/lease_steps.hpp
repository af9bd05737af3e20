#pragma once

#include "cli/options.hpp"

namespace dlock::commands {

// `dlock acquire`: takes the lock for a job that spans several steps and prints the token.
int acquire(const cli::GlobalOptions& global, const cli::AcquireOptions& options);

// `dlock renew`: extends the lease if the token still holds it; 0, or 76 if not.
int renew(const cli::GlobalOptions& global, const cli::RenewOptions& options);

// `dlock release`: compare-and-delete by token (0, or 76 if not held), or --force.
int release(const cli::GlobalOptions& global, const cli::ReleaseOptions& options);

} // namespace dlock::commands
