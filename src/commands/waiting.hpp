#pragma once

#include "lock/store.hpp"
#include "process/signals.hpp"

#include <optional>
#include <string>

namespace dlock::commands {

// How to take a lock: how long and how to wait while it is held, and when a lock taken counts.
// The waiters that take nothing (wait, barrier, latch) use its waiting part.
struct WaitPolicy {
  bool no_wait = false;
  bool fair = false;                 // --fair: first come, first served
  std::optional<util::Millis> wait;  // nullopt: forever
  util::Millis request_timeout{2000};
  bool report_holder = false;        // say who holds it (terminal or -v)
  bool live_progress = false;        // redraw a "waiting for ..." line (stderr is a terminal)
  lock::ReplicaAck replicas{};       // --wait-replicas: a lock taken counts once they have it
  lock::LockKind kind{};             // exclusive, --shared, or a slot of --limit N
};

// A policy for the given options; what is reported follows -q/-v and whether stderr is a
// terminal (nothing in cron unless -v).
WaitPolicy make_wait_policy(bool no_wait, bool fair, std::optional<util::Millis> wait,
                            util::Millis request_timeout);

// Who holds the lock, from an attempt that found it held; with_lease adds the remaining lease
// (not for the redrawn line, where it would go stale).
std::string holder_text(const lock::AcquireResult& result, bool with_lease = true);

// The same for logs that other users read (syslog): who holds it and its lease, never the
// holder's command line, which may be another user's whole line (--record-command).
std::string holder_for_log(const lock::AcquireResult& result);

// The "waiting for SUBJECT" line: redrawn in place on a terminal (with the time waited), one
// line with -v elsewhere (once, the first time the state is known).
class Progress {
public:
  // subject: what is waited for, as the line says it ("lock 'x'", "barrier 'x'").
  Progress(const WaitPolicy& policy, std::string subject);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // What stands in the way now: shown for the redrawn line, reported for the single line.
  void update(std::string shown, const std::string& reported);
  void redraw();
  void clear();

private:
  const WaitPolicy& m_policy;
  std::string m_subject;
  util::TimePoint m_start;
  std::string m_shown;
  bool m_reported = false;
  bool m_drawn = false;
};

// A waiter's view of the lock store going away after it answered once (a restart, a
// failover, a network blip): the waiter keeps trying until its --wait runs out, instead of
// failing (69) as it does when the store cannot be reached at all.
class Outage {
public:
  // subject: what is waited for, as Progress says it.
  Outage(const WaitPolicy& policy, std::string subject);

  // Whether to wait out this error (the store unavailable, after it answered once, while
  // waiting is allowed); says so once per outage.
  bool ride_out(const Error& error, util::TimePoint deadline);
  // Drops what is in flight and pauses (a second at most) before the next attempt; returns
  // the signal that ended the pause, or 0.
  int pause(lock::Store& store, process::SignalFd& signals, util::TimePoint deadline,
            Progress& progress);
  // The store answered.
  void over();

private:
  const WaitPolicy& m_policy;
  std::string m_subject;
  bool m_reached = false; // the store answered at least once
  bool m_during = false;  // in an outage, reported
};

// The answer to the attempt just started on the store (its op), awaited until
// answer_deadline. A store that stopped answering is ridden out when may_ride_out and the
// outage allows it: after a pause, nullopt (try again), with signal set if one ended the pause.
// Other errors throw.
std::optional<lock::Outcome> await_attempt(lock::Store& store, lock::Outcome::Op op,
                                           util::TimePoint answer_deadline,
                                           util::TimePoint deadline, bool may_ride_out,
                                           Outage& outage, process::SignalFd& signals,
                                           Progress& progress, int& signal);

// One round of waiting after an attempt that found the way shut (and registered ticket):
// blocks on the store for a wake-up of ticket, at most block, and until deadline at the
// latest; riding out an outage. Returns the signal that ended it, or 0: woken, or the block
// or the deadline is over, and the caller tries again (a last time, at the deadline).
int block_for_wake(lock::Store& store, const lock::LockName& name, const lock::WaitTicket& ticket,
                   util::Millis block, util::TimePoint deadline, const WaitPolicy& policy,
                   process::SignalFd& signals, Progress& progress, Outage& outage);

} // namespace dlock::commands
