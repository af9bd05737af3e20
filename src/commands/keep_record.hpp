#pragma once

#include "lock/name.hpp"

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dlock::commands {

// What `acquire --keep` leaves on this machine about one token, in a directory only its user
// may write ($XDG_RUNTIME_DIR/dlock, else /tmp/dlock-UID), under a hash of the token: the keep
// process's pid, a mark that the lock was released on purpose, and, once that process saw the
// lease lost, when and why, so that the next `renew` or `release` with that token can say so.
class KeepRecord {
public:
  explicit KeepRecord(const std::string& token);

  // The keep process started: its pid, when it started and the token's fingerprint, for
  // release to stop it and no other process.
  void keep_process_started(pid_t pid) const;
  // Sends sig to the keep process recorded, if it is still that process (through a pidfd,
  // checked after it is opened: a pid reused since is not signalled); false if it was not sent.
  bool signal_keep_process(int sig) const;
  // The lock is being released with the token: the keep process must not take the refusal of
  // its next renewal for a loss.
  void mark_released() const;
  void unmark_released() const;
  bool released() const;
  // The keep process saw the lease lost: "2026-11-23T21:52:07Z: REASON".
  void record_lost(const std::string& reason) const;
  std::optional<std::string> lost() const;
  // Removes everything recorded for the token.
  void forget() const;
  // renew, release: a lease the --keep process saw lost is told (when and why) once, as an
  // error, and the record goes; whether there was one.
  bool report_loss(const std::vector<lock::LockName>& names) const;

private:
  std::string path(const char* suffix) const;
  std::string m_base;        // directory/hash; empty if no safe directory exists
  std::string m_fingerprint; // of the token, in the .holder file: bound to this token alone
};

} // namespace dlock::commands
