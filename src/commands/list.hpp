#pragma once

#include "commands/context.hpp"

#include <string>

namespace dlock::commands {

// `dlock list [PATTERN] [--json]`
struct ListOptions {
  std::string pattern = "*";
  bool json = false;
};

// `dlock list`: every held lock under the prefix, sorted by name; exit 0.
int list(Context& context, const ListOptions& options);

} // namespace dlock::commands
