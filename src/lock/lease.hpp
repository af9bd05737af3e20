#pragma once

#include "util/clock.hpp"
#include "util/duration.hpp"

#include <optional>

namespace dlock::lock {

// The lease length when none is given (--ttl's default).
inline constexpr util::Millis default_ttl{30'000};

// How many replicas must have a write before it counts (--wait-replicas): with asynchronous
// replication a failover can lose a lock that only the old master had.
struct ReplicaAck {
  int replicas = 0;        // 0: the store's own answer is enough
  util::Millis timeout{0}; // how long the store waits for them
};

// The timing rules of a lease, derived from the TTL and --kill-after.
struct LeasePolicy {
  util::Millis ttl = default_ttl;
  util::Millis kill_after{7'500};    // SIGTERM-to-SIGKILL grace
  util::Millis request_limit{2'000}; // longest wait for one renewal reply (connect timeout)
  // How far the store's clocks may run apart over one lease (Redlock: 1% of the TTL + 2 ms):
  // the lease counts as ending that much earlier.
  util::Millis drift{0};

  // Renew every ttl/3, so two renewals may fail before the lease is in danger.
  util::Millis renew_interval() const;
  // After a failed renewal, try again this soon: ttl/10 within [50ms, 1s].
  util::Millis retry_interval() const;
  // Give up on one renewal request after this long: min(ttl/3, request_limit).
  util::Millis request_timeout() const;
  // Kill this long before the lease could expire, for signal delivery and clock rate error.
  util::Millis safety_margin() const;
  // --kill-after, capped so that SIGTERM still comes after the first failed renewal.
  util::Millis effective_kill_after() const;
};

// The client's view of a lease: when to renew, and when the command must be stopped
// because no renewal has been confirmed. All times are monotonic and measured from the
// moment a successful request was *sent*, so the server's expiry is never earlier.
class Lease {
public:
  Lease(LeasePolicy policy, util::TimePoint acquire_sent_at);

  // When the next renewal request should go out (if none is in flight).
  util::TimePoint next_renewal_at() const;
  // The earliest moment the server may drop the lease, as far as the client knows.
  util::TimePoint expires_at() const;
  // SIGTERM the command at this time unless a renewal is confirmed first.
  util::TimePoint terminate_at() const;
  // SIGKILL the command at this time unless a renewal is confirmed first.
  util::TimePoint kill_at() const;
  // The guard's own SIGTERM and SIGKILL times, for when dlock cannot act (frozen): half a
  // safety margin after dlock's, so that a live dlock always acts (and explains) first, and
  // still before the lease could expire.
  util::TimePoint backstop_terminate_at() const;
  util::TimePoint backstop_kill_at() const;

  // A renewal request was sent at now.
  void renewal_sent(util::TimePoint now);
  // Whether a renewal request awaits its reply.
  bool in_flight() const { return m_in_flight_since.has_value(); }
  // When the in-flight request is given up.
  util::TimePoint request_deadline() const;
  // The in-flight renewal succeeded: the lease now runs from its send time.
  void renewal_confirmed();
  // The in-flight renewal failed or timed out at now: retry soon.
  void renewal_failed(util::TimePoint now);
  // The store dropped its connection at now with no renewal in flight: renew soon, since the
  // lock may have gone with the server (a restart), rather than at the next regular turn;
  // at once when the connection was the lease (a database session: the lock is gone).
  void renew_soon(util::TimePoint now, bool at_once = false);

  const LeasePolicy& policy() const { return m_policy; }

private:
  LeasePolicy m_policy;
  util::TimePoint m_confirmed_from;
  util::TimePoint m_next_renewal;
  std::optional<util::TimePoint> m_in_flight_since;
};

} // namespace dlock::lock
