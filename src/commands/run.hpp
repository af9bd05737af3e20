#pragma once

#include "commands/context.hpp"
#include "commands/lock_request.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dlock::commands {

// Options of `dlock run`, validated: how to take the lock, then what to run under it.
struct RunOptions : LockRequestOptions {
  std::vector<std::string> command{}; // argv, or {"/bin/sh", "-c", STRING} for -c
  bool record_command = false;        // --record-command: the whole line, not its program
  bool on_lost_ignore = false;
  std::optional<util::Millis> kill_after{}; // nullopt: ttl/4
  std::optional<util::Millis> max_hold{};
  // Set in and taken out of the command's environment besides DLOCK_*: keeps the store's
  // password from it (unless --export-password).
  std::vector<std::pair<std::string, std::string>> set_env{};
  std::vector<std::string> unset_env{};
  std::optional<std::string> metrics_dir{}; // --metrics-dir: a Prometheus text file per key
};

// `dlock run`: takes the lock, runs the command under a renewed lease, stops it if the lease
// is lost or cannot be confirmed, releases the lock on every path; returns the exit status.
int run(Context& context, const RunOptions& options);

// How one term under the lock ended: an exit status, or death by the signal that ended the
// command (what `run` then does itself).
struct RunEnd {
  int status = 0;
  int die_of = 0;        // SIGINT or SIGQUIT: die of it, as the command did
  bool to_group = false; // ...sending it to dlock's group first, as the terminal would have
  // dlock itself was told to end (a signal while it waited, or one that ends a command: INT,
  // TERM, HUP, QUIT, from kill or the terminal): an election's campaign ends with the term.
  bool stop_asked = false;
};

// run's work without its ending, for run and for each term of `dlock elect`: takes the lock,
// runs the command under it, releases it on every path, reports (syslog, metrics).
RunEnd run_term(Context& context, const RunOptions& options);

} // namespace dlock::commands
