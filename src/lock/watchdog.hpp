#pragma once

#include "lock/lease.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace dlock::lock {

// Why a command is being stopped; the first two end in 76 (lost), the last in 124.
enum class StopReason { none, lost, unconfirmed, max_hold };

// Everything `run` decides its supervision from.
struct WatchdogPolicy {
  LeasePolicy lease;
  bool on_lost_ignore = false;          // --on-lost ignore: never stop for the lease
  std::optional<util::Millis> max_hold; // --max-hold
  ReplicaAck replicas;                  // --wait-replicas: a renewal counts once they have it
};

// Something the user is told, with the one duration its message needs.
struct Notice {
  enum class Kind {
    renewal_timed_out,   // verbose: a renewal got no reply in time; retried
    renewed,             // verbose: a renewal was confirmed
    unconfirmed,         // error: no renewal confirmed for `duration`; stopping the command
    maybe_expired,       // warning: --on-lost ignore and the lease may have lapsed
    lost,                // error: a renewal found the lock gone or taken; stopping
    lost_ignored,        // error: the same, with --on-lost ignore
    frozen,              // error: the guard had to stop the command (dlock was frozen)
    max_hold,            // error: --max-hold reached; stopping
    killing,             // verbose: SIGKILL for the whole tree
    lost_before_release, // error: the release found the lock gone though nothing noticed
    replicas_short,      // warning: a renewal reached `count` replicas too few; it does not count
  };
  Kind kind;
  util::Millis duration{0};
  std::int64_t count = 0;
};

// What the supervisor must do now, decided by the Watchdog.
struct Actions {
  bool send_renewal = false;    // start a renewal (already counted as in flight)
  bool abandon_renewal = false; // the renewal in flight timed out: drop it and its connection
  bool arm_guard = false;       // give the guard the lease's backstop deadlines
  bool terminate = false;       // SIGTERM (and SIGCONT) the command's group; guard deadlines
                                // become terminate_now and kill_at
  bool kill = false;            // SIGKILL the command and everything it started
  std::array<std::optional<Notice>, 3> notices{};

  // Adds a notice (at most three come from one decision).
  void tell(Notice::Kind kind, util::Millis duration = util::Millis(0), std::int64_t count = 0);
  // Merges what other asks for.
  Actions& operator+=(const Actions& other);
};

// How a held run ended, for the exit status.
struct RunVerdict {
  std::optional<int> exit_code; // 76 or 124; nullopt: the command's own status
  std::optional<Notice> notice;
};

// The decisions of `dlock run` while the command runs, as a pure function of time and of what
// the store answered: when to renew, when to SIGTERM and SIGKILL, why the command was stopped,
// and the exit status. Time is given to every call, so it is tested with a fake clock; the
// Supervisor does the I/O. A plain value: a renewer process hands it back through memory.
class Watchdog {
public:
  Watchdog(WatchdogPolicy policy, util::TimePoint acquire_sent_at, util::TimePoint started);

  // The command runs: the guard gets its first deadlines.
  Actions start() const;
  // Timers due at t: renewals, the stop and kill deadlines, --max-hold.
  Actions on_time(util::TimePoint t);
  // The renewal in flight was confirmed (t: when the answer came), and reached
  // replicas_acknowledged replicas when the policy asks for some; too few, and it counts as
  // failed: a failover could lose it.
  Actions renewal_confirmed(util::TimePoint t,
                            std::optional<int> replicas_acknowledged = std::nullopt);
  // The renewal in flight found the lock gone or held by someone else.
  Actions renewal_refused(util::TimePoint t);
  // The renewal in flight failed (no connection, an error reply): retry soon.
  Actions renewal_failed(util::TimePoint t);
  // The store dropped its connection while no renewal was in flight: renew soon (at once when
  // the connection was the lease, Outcome::lease_ended).
  void store_disconnected(util::TimePoint t, bool lease_ended = false);
  // The store's connection was used by another process (the renewer): what was in flight is
  // unknown, so it counts as failed.
  void forget_in_flight(util::TimePoint t);
  // The guard sent SIGTERM (or, killed, SIGKILL) because dlock did not confirm the lease in
  // time: dlock was frozen or stopped.
  Actions guard_stopped(util::TimePoint t, bool killed);

  // When on_time must next be called.
  util::TimePoint next_wakeup(util::TimePoint t) const;
  // Whether the supervisor should keep the renewer going (false once stopping).
  bool stopping() const noexcept { return m_stopping; }
  StopReason stop_reason() const noexcept { return m_reason; }
  // When SIGKILL follows the SIGTERM sent (valid once stopping).
  util::TimePoint kill_at() const noexcept { return m_kill_at.value_or(util::TimePoint::max()); }
  // With --on-lost ignore: the lease was lost, or may have lapsed, while the command ran.
  bool ran_unprotected() const noexcept { return m_lost || m_unconfirmed_past_expiry; }
  // The exit status once the command ended and the release was tried: released is true if
  // the release found the lock ours, false if gone, nullopt if the store did not answer.
  RunVerdict verdict(std::optional<bool> released) const;

  const Lease& lease() const noexcept { return m_lease; }
  const WatchdogPolicy& policy() const noexcept { return m_policy; }

private:
  Actions begin_stop(StopReason reason, util::TimePoint t);
  Actions kill();

  WatchdogPolicy m_policy;
  Lease m_lease;
  util::TimePoint m_started;
  bool m_renewing = true;                 // renewals go on (not after a loss)
  bool m_lost = false;                    // a renewal found the lock gone or taken
  bool m_unconfirmed_past_expiry = false; // --on-lost ignore: the lease may have lapsed
  bool m_stopping = false;                // SIGTERM was sent
  bool m_killed = false;                  // SIGKILL was sent
  bool m_replicas_short = false;          // the last renewal reached too few replicas (told once)
  StopReason m_reason = StopReason::none;
  std::optional<util::TimePoint> m_kill_at; // SIGKILL after SIGTERM, per --kill-after
};

// The message for a notice about lock name, and whether it is an error, a warning or detail;
// loss_cause says how the store loses a lock (Store::loss_cause).
std::string describe(const Notice& notice, std::string_view name, std::string_view loss_cause);
enum class NoticeLevel { error, warning, verbose };
NoticeLevel level(Notice::Kind kind);

} // namespace dlock::lock
