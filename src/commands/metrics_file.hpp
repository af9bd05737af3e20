#pragma once

#include "lock/name.hpp"

#include <cstdint>
#include <string>
#include <string_view>

// --metrics-dir: a Prometheus text file per key for node_exporter's textfile collector, so
// that a fleet's runs, skips and losses show on a dashboard without a daemon of dlock's own;
// and the text exposition format itself, which `list --format prometheus` writes too.
namespace dlock::commands {

// Prometheus's text exposition format, written family by family: the one home of its escaping
// and layout, so that a key another tenant named `a"}b\` cannot break a file or a scrape.
class PrometheusText {
public:
  // A label value as it goes between double quotes: '\', '"' and newline escaped, and a byte
  // that is not UTF-8 as U+FFFD (the format is UTF-8; JSON output does the same).
  static std::string label_value(std::string_view text);
  // name{labels}: one series, as written and as read back.
  static std::string series(std::string_view name, std::string_view labels);

  // Starts a family: its HELP and TYPE lines come before its first sample, and only if it
  // has one (a family without samples is left out).
  void family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of the family begun last; value as written ("1", "0.250").
  void sample(std::string_view series, std::string_view value);
  // A comment line (not HELP or TYPE), which parsers skip.
  void comment(std::string_view text);
  const std::string& str() const noexcept { return m_text; }

private:
  std::string m_text;
  std::string m_header; // the family's HELP and TYPE lines, until its first sample
};

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

// Writes key's file in dir when this run has taken the lock: held 1 since acquired_at (Unix
// time, seconds), the last run's series and the counters carried on unchanged, so that an
// alert on a lock held too long works while the command runs. It waits for the lock file only
// briefly (the lease runs meanwhile). Error(internal) if it cannot.
void write_acquired_metrics(const std::string& dir, const lock::LockName& key, double acquired_at);

// Writes key's file in dir when the run ends: the last run's outcome, exit code, wait and hold
// time, held 0 (unless another run of this host holds it: a --shared or --limit lock), and the
// counters of runs, skips, losses and errors carried on from the file it replaces. Atomic
// (written aside under a random name, then renamed over), and serialized with other dlock
// processes by a lock file (".dlock_NAME.lock", which the collector ignores). Safe in a
// directory other users write: no symlink is followed, nothing but a small regular file is
// read back, and another user's hold on the lock file delays it by seconds at most.
// Error(internal) if it cannot.
void write_run_metrics(const std::string& dir, const lock::LockName& key, const RunMetrics& run);

} // namespace dlock::commands
