#pragma once

#include "commands/acquire.hpp"
#include "hold/waiter.hpp"
#include "process/signals.hpp"

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dlock::commands {

// The process that takes and keeps the lock of `acquire --keep`, forked before the lock is asked
// for: it takes the lock itself, so that where the lease is a database session or a descriptor
// (PostgreSQL, MySQL, ZooKeeper, file://) the process that lives on is the one that has it, and
// its pid is the holder's. It tells this process how the attempt ended, then detaches and
// renews the lease; if nothing was taken, it exits.
class KeepProcess {
public:
  // Forks the keep process, which takes names with request (its holder's pid and command are
  // the keep process's own) as policy says; owner is the process it keeps the lock for.
  KeepProcess(Context& context, std::vector<lock::LockName> names, hold::WaitPolicy policy,
              lock::AcquireRequest request, const KeepOptions& options, pid_t owner);
  ~KeepProcess();
  KeepProcess(const KeepProcess&) = delete;
  KeepProcess& operator=(const KeepProcess&) = delete;

  pid_t pid() const noexcept { return m_pid; }
  // Waits for the keep process's outcome of the attempt, passing on each signal that comes
  // meanwhile (it then gives up, and lets go of a lock it had just taken); throws its error.
  hold::Taken outcome(process::SignalFd& signals);
  // The keep process releases the lock and exits (the token could not be handed over).
  void stop() noexcept;

private:
  // Waits (briefly) for the keep process to end when it took nothing, so that no process of
  // this acquire outlives it.
  void await_exit() noexcept;

  pid_t m_pid = -1;
  int m_answer = -1; // read end of the pipe the keep process tells the outcome on
};

} // namespace dlock::commands
