#pragma once

#include "cli/options.hpp"

namespace dlock::commands {

// `dlock status`: who holds one lock; exit 0 when held, 1 when free.
int status(const cli::GlobalOptions& global, const cli::StatusOptions& options);

// `dlock list`: every held lock under the prefix, sorted by name; exit 0.
int list(const cli::GlobalOptions& global, const cli::ListOptions& options);

} // namespace dlock::commands
