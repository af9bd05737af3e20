#pragma once

#include "lock/store.hpp"
#include "util/duration.hpp"

namespace dlock::commands {

// What every subcommand works with: the lock store, and how long one request may take.
struct Context {
  lock::Store& store;
  util::Millis request_timeout{2000}; // --connect-timeout: each connection attempt and request
};

} // namespace dlock::commands
