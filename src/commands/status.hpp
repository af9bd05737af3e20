#pragma once

#include "commands/context.hpp"
#include "lock/name.hpp"

#include <string>
#include <vector>

namespace dlock::commands {

// `dlock status KEY [--json]`
struct StatusOptions {
  lock::LockName key;
  bool json = false;
};

// `dlock status`: who holds one lock; exit 0 when held, 1 when free.
int status(Context& context, const StatusOptions& options);

// Who holds a lock as status and list show it: user@host ("?" when the store does not say).
std::string holder_name(const lock::HolderInfo& holder);

// Rows as a table: each column as wide as its widest cell, two blanks apart, no blanks at the
// end of a line (list and history print their tables so).
std::string aligned_columns(const std::vector<std::vector<std::string>>& rows);

// Writes text to stdout as it is.
void print(const std::string& text);

} // namespace dlock::commands
