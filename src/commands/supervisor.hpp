#pragma once

#include "cli/options.hpp"
#include "lock/client.hpp"
#include "lock/lease.hpp"
#include "process/child.hpp"
#include "process/signals.hpp"

#include <optional>
#include <string>

namespace dlock::commands {

// Why dlock is stopping the command; the first two end in 76, the last in 124.
enum class StopReason { none, lost, unconfirmed, max_hold };

// Everything the supervisor decides from, as a plain value: a renewer process that keeps the
// lease while dlock is stopped (Ctrl-Z) hands it back through shared memory.
struct SupervisorState {
  explicit SupervisorState(lock::Lease lease_) : lease(lease_) {}

  lock::Lease lease;
  bool renewing = true;                 // renewals go on (not after a loss)
  bool lost = false;                    // a renewal found the lock gone or taken
  bool unconfirmed_past_expiry = false; // --on-lost ignore: the lease may have lapsed
  bool stopping = false;                // SIGTERM was sent
  bool killed = false;                  // SIGKILL was sent
  StopReason reason = StopReason::none;
  std::optional<util::TimePoint> kill_at; // SIGKILL after SIGTERM, per --kill-after
};

// How the command ended, for run to report.
struct CommandEnd {
  int status = 0;          // as a shell reports it: code, or 128+N
  int signal = 0;          // N when the command died of signal N
  bool terminal_sent = false; // the terminal sent that signal to the command's group
};

// Supervises a running command: renews the lease, gives the guard the deadline after every
// confirmed renewal, forwards signals, enforces deadlines, and mirrors job control (Ctrl-Z)
// while the lease goes on being renewed.
class Supervisor {
public:
  Supervisor(lock::LockClient& client, const cli::RunOptions& options, std::string token,
             lock::Lease lease, process::ProcessGroup& child, process::SignalFd& signals);

  // Tells the guard the first deadline; call once the command runs.
  void arm();
  // Runs until the command exits; throws Error if the guard is lost.
  CommandEnd wait_for_exit();

  StopReason stop_reason() const { return m_state.reason; }
  // With --on-lost ignore: the lease was lost, or may have lapsed, while the command ran.
  bool ran_unprotected() const { return m_state.lost || m_state.unconfirmed_past_expiry; }

private:
  void on_timers(util::TimePoint t);
  util::TimePoint next_wakeup() const;
  void send_renewal(util::TimePoint t, bool with_source);
  void on_redis_io(short revents);
  void on_renewal_reply(const redisReply& reply);
  void give_guard_deadline() const;
  void begin_stop(StopReason reason, util::TimePoint t, const std::string& message);
  void hard_kill();
  void on_signal(int sig);
  std::optional<CommandEnd> on_event(const process::CommandEvent& event);
  void pause_while_stopped(int sig);
  [[noreturn]] void renew_for_stopped_parent(void* shared, pid_t parent);
  int poll_timeout() const;
  const std::string& name() const { return m_client.keys().name; }

  lock::LockClient& m_client;
  const cli::RunOptions& m_options;
  std::string m_token;
  process::ProcessGroup& m_child;
  process::SignalFd& m_signals;
  util::TimePoint m_started;
  SupervisorState m_state;
  int m_terminal_signal = 0;
};

} // namespace dlock::commands
