#pragma once

#include "commands/context.hpp"
#include "lock/name.hpp"

#include <string>
#include <vector>

namespace dlock::commands {

// `dlock release --key K... (--token T | --force)`
struct ReleaseOptions {
  std::vector<lock::LockName> keys;
  std::string token{}; // empty with force
  bool force = false;
};

// `dlock release`: compare-and-delete by token (0, or 76 if not held), or --force.
int release(Context& context, const ReleaseOptions& options);

} // namespace dlock::commands
