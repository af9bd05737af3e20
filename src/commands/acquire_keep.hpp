#pragma once

#include "commands/acquire.hpp"

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dlock::commands {

// The process that keeps the lock of `acquire --keep` (renewing its lease with a
// hold::LeaseKeeper), forked before the lock is asked for (so that the store has no connection
// yet to share, and its pid can be recorded as the lock's holder). It waits for go(); if this
// process exits or calls abort() instead, it exits and holds nothing.
class KeepProcess {
public:
  // Forks the keep process of names for token; owner is the process it keeps the lock for.
  KeepProcess(Context& context, std::vector<lock::LockName> names, std::string token,
              util::Millis ttl, const KeepOptions& options, pid_t owner);
  ~KeepProcess();
  KeepProcess(const KeepProcess&) = delete;
  KeepProcess& operator=(const KeepProcess&) = delete;

  pid_t pid() const noexcept { return m_pid; }
  // The lock is taken (its lease runs from sent_at, for validity or the whole TTL): the keep
  // process detaches and renews it.
  void go(util::TimePoint sent_at, std::optional<util::Millis> validity);
  // Nothing was taken: the keep process exits.
  void abort() noexcept;
  // The keep process releases the lock and exits (the token could not be handed over).
  void stop() noexcept;

private:
  pid_t m_pid = -1;
  int m_go = -1; // write end of the pipe the keep process waits on
};

} // namespace dlock::commands
