#pragma once

#include "hold/lease_keeper.hpp"
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
  // The last signal that ends a command (INT, TERM, HUP, QUIT) dlock forwarded or the terminal
  // sent while it ran, whatever the command made of it; 0: none.
  int stop_signal = 0;
};

// The command's side of `run` while it holds the lock: a hold::LeaseKeeper renews the lease as
// the Watchdog decides; the Supervisor gives the guard its deadlines, forwards signals, stops
// and kills the command, and mirrors job control (Ctrl-Z: the keeper's renewer holds the lease
// while dlock is stopped).
class Supervisor final : private hold::LeaseEvents {
public:
  // lock: every key, the token and how it holds them; the lease as the watchdog starts it.
  Supervisor(lock::Store& store, hold::KeptLock lock, lock::Watchdog watchdog,
             process::ProcessGroup& child, process::SignalFd& signals,
             hold::Clock& clock = hold::system_clock());

  // Gives the guard the lease's deadlines, then has it start the command: the guard enforces
  // them from the command's first instant, and reads both requests in one wake-up.
  void start(const process::CommandSpec& spec);
  // Runs until the command exits; throws Error if the guard is lost.
  CommandEnd wait_for_exit();

  const lock::Watchdog& watchdog() const noexcept { return m_keeper.watchdog(); }
  // How the lock was lost (replaced by whom, or the store's way), for messages.
  std::string loss_cause() const { return m_keeper.loss_cause(); }
  // Whether a --replace acquirer took the lock over (the loss was asked for).
  bool replaced() const noexcept { return m_keeper.replaced(); }
  // The first error told while the command ran (why the lease was lost), or "".
  const std::string& first_error() const noexcept { return m_first_error; }

private:
  void act(const lock::Actions& actions) override;
  void renewal_error(const Error& error) override;
  void disconnected(const lock::Outcome& outcome) override;
  void on_signal(int sig);
  std::optional<CommandEnd> on_event(const process::CommandEvent& event);
  void pause_while_stopped(int sig);

  std::string m_shown; // the names, for messages
  hold::LeaseKeeper m_keeper;
  process::ProcessGroup& m_child;
  process::SignalFd& m_signals;
  std::string m_first_error;
  int m_terminal_signal = 0;
  int m_stop_signal = 0;          // CommandEnd::stop_signal
  bool m_command_stopped = false; // by a SIGTSTP without job control: SIGCONT continues it
};

} // namespace dlock::commands
