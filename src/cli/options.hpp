#pragma once

#include "redis/connection.hpp"
#include "util/duration.hpp"

#include <optional>
#include <utility>
#include <string>
#include <vector>

namespace dlock::cli {

// How the environment of a command dlock runs differs from dlock's own.
struct EnvironmentChanges {
  std::vector<std::pair<std::string, std::string>> set;
  std::vector<std::string> unset;
};

// Options every subcommand shares, resolved (URL parsed, password read).
struct GlobalOptions {
  redis::ConnectOptions connect;
  std::string prefix = "dlock:";
  // Keeps the store's password out of a command's environment (DLOCK_PASSWORD, a password
  // in DLOCK_URL); a password file is passed on by name, so nested dlock calls still work.
  EnvironmentChanges hide_password;
};

// Options of `dlock run` after validation.
struct RunOptions {
  std::string key;
  util::Millis ttl{30'000};
  std::optional<util::Millis> wait;   // nullopt: wait forever
  bool no_wait = false;
  bool fair = false;                  // first come, first served among waiters
  int conflict_exit_code = 75;
  std::vector<std::string> command;   // argv, or {"/bin/sh", "-c", STRING} for -c
  bool on_lost_ignore = false;
  std::optional<util::Millis> kill_after; // nullopt: ttl/4
  std::optional<util::Millis> max_hold;
  bool export_password = false;       // the command may see the password (nested dlock calls)
};

} // namespace dlock::cli

namespace dlock::cli {

// `dlock status KEY [--json]`
struct StatusOptions {
  std::string key;
  bool json = false;
};

// `dlock list [PATTERN] [--json]`
struct ListOptions {
  std::string pattern = "*";
  bool json = false;
};

// `dlock acquire --key K --ttl D [--wait D | --no-wait] [--json]`
struct AcquireOptions {
  std::string key;
  util::Millis ttl{30'000};
  std::optional<util::Millis> wait;
  bool no_wait = false;
  bool fair = false;
  int conflict_exit_code = 75;
  bool json = false;
};

// `dlock renew --key K --token T [--ttl D]`
struct RenewOptions {
  std::string key;
  std::string token;
  std::optional<util::Millis> ttl; // nullopt: the holder's own lease length
};

// `dlock release --key K (--token T | --force)`
struct ReleaseOptions {
  std::string key;
  std::string token;
  bool force = false;
};

} // namespace dlock::cli
