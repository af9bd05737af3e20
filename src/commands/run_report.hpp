#pragma once

#include "lock/holder.hpp"
#include "lock/kind.hpp"
#include "lock/name.hpp"
#include "lock/store.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// What one `dlock run` did, told as it happens to syslog (--syslog: one structured line per
// event) and to the lock's history in the store (dlock history), and in the metrics files
// (--metrics-dir: held from the acquisition, summed up at the end). Never the token: it would
// let a reader release the lock. The one home of all three, so that run.cpp only says what
// happened.
namespace dlock::commands {

class RunReport {
public:
  // keys in canonical order; metrics_dir: --metrics-dir, if given; store: where the history
  // goes, each write waited for request_timeout at most.
  RunReport(const std::vector<lock::LockName>& keys, lock::LockKind kind, util::Millis ttl,
            std::optional<std::string> metrics_dir, lock::Store& store,
            util::Millis request_timeout);
  RunReport(const RunReport&) = delete;
  RunReport& operator=(const RunReport&) = delete;

  // The lock was taken by holder ("user@host pid N"), after waiting since the report began;
  // fences in key order. The metrics files say it is held (a failure to is a warning).
  void acquired(const lock::HolderInfo& holder, const std::vector<std::int64_t>& fences);
  // holder's lock was not obtained (-n, or --wait ran out), held_by whom (as status says it).
  void skipped(const lock::HolderInfo& holder, const std::string& held_by, std::string_view reason);
  // A signal ended the wait.
  void interrupted(int signal);
  // The lease was lost (or could not be confirmed) while the command ran, and why; replaced: a
  // --replace acquirer took it over.
  void lost(const std::string& why, bool replaced = false);
  // The lock was released (released: the release found it ours; false: it was gone; nullopt:
  // the store did not answer, so it expires with its lease).
  void released(std::optional<bool> released, int command_status);
  // The run ends with this exit status (after one of the above), or an error: writes the
  // metrics files (a failure to is a warning; the run's status stands).
  void finished(int exit_status);
  void failed(int exit_status, const std::string& error);

private:
  void write_metrics(int exit_status);
  void record_end(int exit_status);
  std::string key_text() const;
  std::string fence_text() const;

  std::vector<lock::LockName> m_keys;
  lock::LockKind m_kind;
  util::Millis m_ttl;
  std::optional<std::string> m_metrics_dir;
  lock::Store& m_store;
  util::Millis m_request_timeout;
  lock::HolderInfo m_holder; // once acquired: who, with the first key's fencing token
  std::string m_loss;        // lost: why
  bool m_replaced = false;   // lost: to a --replace acquirer
  bool m_release_answered = false;
  util::TimePoint m_started;
  std::optional<util::TimePoint> m_acquired_at;
  std::optional<util::TimePoint> m_released_at;
  std::vector<std::int64_t> m_fences;
  std::string m_outcome = "error"; // see run_outcomes
  bool m_finished = false;
};

} // namespace dlock::commands
