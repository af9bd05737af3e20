#pragma once

#include "hold/clock.hpp"
#include "lock/store.hpp"
#include "process/signals.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dlock::hold {

// How to wait while the way is shut (a lock held, a gate closed), and when a lock taken
// counts. The waiters that take nothing (wait, barrier, latch) use its waiting part.
struct WaitPolicy {
  bool no_wait = false;
  bool fair = false;                // --fair: first come, first served
  std::optional<util::Millis> wait; // nullopt: forever
  util::Millis request_timeout{2000};
  bool report_holder = false;  // say who holds it (terminal or -v)
  bool live_progress = false;  // redraw a "waiting for ..." line (stderr is a terminal)
  lock::ReplicaAck replicas{}; // --wait-replicas: a lock taken counts once they have it
  lock::LockKind kind{};       // exclusive, --shared, or a slot of --limit N
};

// A policy for the given options; what is reported follows -q/-v and whether stderr is a
// terminal (nothing in cron unless -v).
WaitPolicy make_wait_policy(bool no_wait, bool fair, std::optional<util::Millis> wait,
                            util::Millis request_timeout);

// Refuses (lock::require) the policies of request a store does not have, before anything is sent.
void require_policy(const lock::Store& store, const lock::LockPolicy& policy);

// Who holds the lock, from an attempt that found it held; with_lease adds the remaining lease
// (not for the redrawn line, where it would go stale).
std::string who_holds(const lock::AcquireResult& result, bool with_lease = true);

// The same for logs that other users read (syslog): who holds it and its lease, never the
// holder's command line, which may be another user's whole line (--record-command).
std::string who_holds_for_log(const lock::AcquireResult& result);

// How a wait for one lock ended.
struct Taken {
  bool acquired = false;
  std::int64_t fence = 0;
  util::TimePoint sent_at{}; // when the winning request left: the lease runs from here
  // The part of the lease left when the lock was granted, for a store of several nodes
  // (Redlock); nullopt: the whole TTL.
  std::optional<util::Millis> validity{};
  int signal = 0;                     // non-zero: interrupted by this signal while waiting
  std::vector<std::int64_t> fences{}; // several keys: each one's fencing token, in their order
  std::string held_by{};   // not acquired: who held the lock at the last attempt (for logs)
  bool superseded = false; // not acquired: a newer --supersede waiter came (held_by says who)
};

// How a wait at a gate (dlock wait, barrier, latch --wait) ended.
struct Passed {
  bool open = false;      // the gate opened (or, for a barrier, tripped before the withdrawal)
  int signal = 0;         // non-zero: interrupted by this signal
  std::int64_t since = 0; // the last answer's GateResult::since (leader: the term it opened on)
};

// A gate to wait at: the request (its ticket's mode says which, and a leader watcher's since the
// term it saw), the longest single block, and
// what the progress and time-out lines call it ("barrier 'x'").
struct Gate {
  lock::Coordination* coordination = nullptr; // the store's, asked for once by the command
  lock::GateRequest request;
  util::Millis block_cap{30'000};
  std::string subject;
};

// The one wait loop of dlock, for a lock to take and for the gates (a lock to be free, a
// barrier, a latch): each attempt that finds the way shut registers the waiter in the same
// step, then it blocks on the store for a wake-up (no polling), for no longer than the store
// says (a holder's remaining lease), with a last attempt at the --wait deadline, after which
// it withdraws. A store that goes away after it answered once is ridden out until --wait runs
// out; Ctrl-Z stops dlock as any command; other signals end the wait. One Waiter, one wait.
class Waiter {
public:
  Waiter(Clock& clock, lock::Store& store, process::SignalFd& signals, WaitPolicy policy);
  ~Waiter();
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  // Starts the first attempt to take name, and returns while it is in flight, so that the
  // caller's own work (forking the guard) hides behind the round trip.
  void begin_take(const lock::LockName& name, const lock::AcquireRequest& request);
  // The caller's work after begin_take failed: awaits the first attempt and gives back a lock
  // it took, so that the caller's error can go on. Throws the store's errors first.
  void cancel();
  // Waits until the lock is taken, --wait runs out (--no-wait: at once), or a signal.
  Taken finish_take();
  // begin_take and finish_take.
  Taken take(const lock::LockName& name, const lock::AcquireRequest& request);

  // Waits until the gate opens, --wait runs out, or a signal.
  Passed pass(const lock::LockName& name, const Gate& gate);

  class Way; // what is waited for: a lock or a gate (waiter.cpp)

private:
  struct End;
  struct Answer;
  enum class Woken;
  void begin(const lock::LockName& name, std::unique_ptr<Way> way);
  void send();
  End wait();
  Answer answer();
  int block_for_wake(util::Millis block);
  Woken sleep_until(util::TimePoint until);
  int pause();
  bool withdraw();
  lock::Outcome await(lock::Outcome::Op op, util::TimePoint deadline);

  Clock& m_clock;
  lock::Store& m_store;
  process::SignalFd& m_signals;
  WaitPolicy m_policy;
  class Progress;
  class Outage;
  int m_signal = 0; // the signal that ended the last sleep
  std::unique_ptr<Progress> m_progress;
  std::unique_ptr<Outage> m_outage;
  std::unique_ptr<Way> m_way;
  std::optional<lock::LockName> m_name;
  lock::WaitTicket m_ticket;
  util::TimePoint m_deadline{};
  util::TimePoint m_sent_at{};
  bool m_in_flight = false; // begin_take's attempt awaits its answer
};

} // namespace dlock::hold
