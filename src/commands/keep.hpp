#pragma once

#include "commands/context.hpp"
#include "commands/lease_steps.hpp"
#include "lock/name.hpp"

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dlock::commands {

// What `acquire --keep` leaves on this machine about one token, in a directory only its user
// may write ($XDG_RUNTIME_DIR/dlock, else /tmp/dlock-UID), under a hash of the token: the
// holder's pid, a mark that the lock was released on purpose, and, once the holder saw the
// lease lost, when and why, so that the next `renew` or `release` with that token can say so.
class KeepRecord {
public:
  explicit KeepRecord(const std::string& token);

  // The holder process started: its pid, when it started and the token's fingerprint, for
  // release to stop it and no other process.
  void holder_started(pid_t pid) const;
  // Sends sig to the holder recorded, if it is still that process (through a pidfd, checked
  // after it is opened: a pid reused since is not signalled); false if it was not sent.
  bool signal_holder(int sig) const;
  // The lock is being released with the token: the holder must not take the refusal of its
  // next renewal for a loss.
  void mark_released() const;
  void unmark_released() const;
  bool released() const;
  // The holder saw the lease lost: "2026-11-23T21:52:07Z: REASON".
  void record_lost(const std::string& reason) const;
  std::optional<std::string> lost() const;
  // Removes everything recorded for the token.
  void forget() const;

private:
  std::string path(const char* suffix) const;
  std::string m_base; // directory/hash; empty if no safe directory exists
  std::string m_fingerprint; // of the token, in the holder file: bound to this token alone
};

// The holder of `acquire --keep`, forked before the lock is asked for (so that the store has
// no connection yet to share, and the holder's pid can be recorded as the lock's holder). It
// waits for go(); if this process exits or calls abort() instead, it exits and holds nothing.
class Keeper {
public:
  // Forks the holder of names for token; owner is the process it keeps the lock for.
  Keeper(Context& context, std::vector<lock::LockName> names, std::string token, util::Millis ttl,
         const KeepOptions& options, pid_t owner);
  ~Keeper();
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;

  pid_t pid() const noexcept { return m_pid; }
  // The lock is taken (its lease runs from sent_at, for validity or the whole TTL): the holder
  // detaches and renews it.
  void go(util::TimePoint sent_at, std::optional<util::Millis> validity);
  // Nothing was taken: the holder exits.
  void abort() noexcept;
  // The holder releases the lock and exits (the token could not be handed over).
  void stop() noexcept;

private:
  pid_t m_pid = -1;
  int m_go = -1; // write end of the pipe the holder waits on
};

} // namespace dlock::commands
