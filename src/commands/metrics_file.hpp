#pragma once

#include "lock/name.hpp"

#include <cstdint>
#include <string>

// --metrics-dir: a Prometheus text file per key for node_exporter's textfile collector, so
// that a fleet's runs, skips and losses show on a dashboard without a daemon of dlock's own.
namespace dlock::commands {

// How one `dlock run` ended, for its metrics.
struct RunMetrics {
  std::string outcome;     // one of run_outcomes
  int exit_code = 0;       // dlock's exit status
  double wait_seconds = 0; // from the first attempt until the lock was taken or given up
  double hold_seconds = 0; // from the lock taken until its release (0 if not taken)
  double ended_at = 0;     // Unix time, seconds
};

// The outcomes a run can have: the command ran (whatever its status), the lock was not
// obtained (-n, or --wait ran out), the lease was lost, a signal ended the wait, or an error.
inline constexpr const char* run_outcomes[] = {"ran", "skipped", "lost", "interrupted", "error"};

// The file of key in dir: dlock_NAME.prom, NAME the key with anything but letters, digits,
// '_', '-' and '.' replaced by '_' (and a hash of the key added when something was replaced,
// or the key is long, so that two keys never share a file).
std::string metrics_file_name(const lock::LockName& key);

// Writes key's file in dir: the last run's outcome, exit code, wait and hold time, and the
// counters of runs, skips, losses and errors carried on from the file it replaces. Atomic
// (written aside under a random name, then renamed over), and serialized with other dlock
// processes by a lock file (".dlock_NAME.lock", which the collector ignores). Safe in a
// directory other users write: no symlink is followed, nothing but a small regular file is
// read back, and another user's hold on the lock file delays it by seconds at most.
// Error(internal) if it cannot.
void write_run_metrics(const std::string& dir, const lock::LockName& key, const RunMetrics& run);

} // namespace dlock::commands
