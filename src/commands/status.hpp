#pragma once

#include "commands/context.hpp"
#include "lock/name.hpp"

#include <string>

namespace dlock::commands {

// `dlock status KEY [--json]`
struct StatusOptions {
  lock::LockName key;
  bool json = false;
};

// `dlock list [PATTERN] [--json]`
struct ListOptions {
  std::string pattern = "*";
  bool json = false;
};

// `dlock status`: who holds one lock; exit 0 when held, 1 when free.
int status(Context& context, const StatusOptions& options);

// `dlock list`: every held lock under the prefix, sorted by name; exit 0.
int list(Context& context, const ListOptions& options);

} // namespace dlock::commands
