#pragma once

#include "redis/connection.hpp"
#include "util/duration.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dlock::cli {

// Options every subcommand shares, resolved (URL parsed, password read).
struct GlobalOptions {
  redis::ConnectOptions connect;
  std::string prefix = "dlock:";
};

// Options of `dlock run` after validation.
struct RunOptions {
  std::string key;
  util::Millis ttl{30'000};
  std::optional<util::Millis> wait;   // nullopt: wait forever
  bool no_wait = false;
  int conflict_exit_code = 75;
  std::vector<std::string> command;   // argv, or {"/bin/sh", "-c", STRING} for -c
  bool on_lost_ignore = false;
  std::optional<util::Millis> kill_after; // nullopt: ttl/4
  std::optional<util::Millis> max_hold;
};

} // namespace dlock::cli
