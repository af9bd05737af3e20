#pragma once

#include "commands/renewal_round.hpp"
#include "lock/store.hpp"
#include "lock/watchdog.hpp"
#include "process/child.hpp"
#include "process/signals.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dlock::commands {

// How the command ended, for run to report.
struct CommandEnd {
  int status = 0;             // as a shell reports it: code, or 128+N
  int signal = 0;             // N when the command died of signal N
  bool terminal_sent = false; // the terminal sent that signal to the command's group
};

// The I/O of supervising a running command, as the Watchdog decides it: renews the lease
// through the store, gives the guard its deadlines, forwards signals, stops and kills the
// command, and mirrors job control (Ctrl-Z) while a renewer process keeps the lease.
class Supervisor {
public:
  // names: every key of the lock (one lease renewal covers them all; losing one is losing it).
  // kind: how the token holds them (a renewal of a slot differs from one of the lock alone).
  Supervisor(lock::Store& store, std::vector<lock::LockName> names, std::string token,
             lock::LockKind kind, lock::Watchdog watchdog, process::ProcessGroup& child,
             process::SignalFd& signals);

  // Gives the guard the lease's deadlines, then has it start the command: the guard enforces
  // them from the command's first instant, and reads both requests in one wake-up.
  void start(const process::CommandSpec& spec);
  // Runs until the command exits; throws Error if the guard is lost.
  CommandEnd wait_for_exit();

  const lock::Watchdog& watchdog() const noexcept { return m_watchdog; }
  // The first error told while the command ran (why the lease was lost), or "".
  const std::string& first_error() const noexcept { return m_first_error; }

private:
  void act(const lock::Actions& actions);
  void take_outcomes();
  // One key's renewal answered; the watchdog hears of the round once every key has.
  void on_renewal(const lock::Outcome& outcome, util::TimePoint t);
  void on_signal(int sig);
  std::optional<CommandEnd> on_event(const process::CommandEvent& event);
  void pause_while_stopped(int sig);
  [[noreturn]] void renew_for_stopped_parent(void* shared, pid_t parent);

  lock::Store& m_store;
  std::vector<lock::LockName> m_names;
  std::string m_shown; // the names, for messages
  std::string m_token;
  lock::LockKind m_kind;
  RenewalRound m_round;
  lock::Watchdog m_watchdog;
  process::ProcessGroup& m_child;
  process::SignalFd& m_signals;
  std::string m_first_error;
  int m_terminal_signal = 0;
  bool m_command_stopped = false; // by a SIGTSTP without job control: SIGCONT continues it
};

} // namespace dlock::commands
