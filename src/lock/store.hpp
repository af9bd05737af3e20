#pragma once

#include "lock/features.hpp"
#include "lock/history.hpp"
#include "lock/holder.hpp"
#include "lock/kind.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"
#include "lock/status.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"
#include "util/error.hpp"
#include "util/event_loop.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::lock {

// How an acquisition attempt waits if the lock is held.
enum class WaitMode {
  once, // --no-wait: a single attempt, not registered as a waiter
  wait, // woken by any release, no order among waiters
  fair, // first come, first served queue
  // Waiters that take nothing (dlock wait, barrier, latch --wait): each has its own
  // registrations and wake-up lists, so that none takes a wake-up meant for lock waiters.
  watch,   // until the lock is free
  barrier, // until the barrier's parties have arrived
  latch,   // until the latch's count reaches zero
  // until the lock's leader is another than the one seen (dlock leader --watch): woken by a
  // release and by a candidate's acquisition (AcquireRequest::holder.value set).
  leader,
};

// A waiter's identity and patience, sent with each attempt.
struct WaitTicket {
  WaitMode mode = WaitMode::once;
  std::string waiter_id;     // random, per dlock process
  util::Millis max_block{0}; // never block past the caller's --wait deadline
  // watch: when this watcher first found the lock held (the store's clock, in µs; 0 before):
  // a lock taken from free since then counts as freed, even if a lock waiter took it first.
  // leader: the term seen (GateResult::since; 0: nobody held it; -1: none seen yet, so that
  // the first look opens at once).
  std::int64_t since = 0;
  // barrier: the generation this party joined (0 before it arrived): a later one means that
  // its barrier tripped, and its wake-ups come on that generation's own list.
  std::int64_t generation = 0;
  // A lock waiter's attempt after one that registered it (an earlier attempt was not granted):
  // a --supersede waiter announces itself on its first registration only.
  bool registered = false;
};

// One attempt of a waiter that takes nothing (start_gate).
struct GateRequest {
  WaitTicket ticket;        // its mode says which gate: watch, barrier or latch
  std::int64_t parties = 0; // barrier: how many parties make it trip (every party gives the same)
};

// The cron and CI policies of one acquisition: kept with the lock in the store, so that every
// dlock honours them whatever becomes of the holder (see each store's features for which it has).
struct LockPolicy {
  // --min-hold: the lock stays taken at least this long from its acquisition (the store's clock),
  // however the holder ends: a release by token before then leaves it held, marked as ended
  // (LockStatus::command_ended), until then; only release --force frees it sooner. 0: none.
  util::Millis min_hold{0};
  // --lock-delay: when this holder's lease ends without a release by token (it expired, was
  // lost, or was forced), the lock cannot be taken for this long after (Lease::lock_delay). 0:
  // none.
  util::Millis lock_delay{0};
  // --replace: when another holds the lock, ask it to stand down (its next renewal is refused,
  // Outcome::replaced_by), then wait for its release as usual (AcquireResult::replace_asked).
  bool replace = false;
  // --supersede: a waiter that registers announces itself the newest; any older --supersede
  // waiter's next attempt answers superseded_by instead of waiting on (woken to see it).
  bool supersede = false;
};

// One attempt to take a lock.
struct AcquireRequest {
  std::string token; // secret of this holder; renew and release must present it
  util::Millis ttl{30'000};
  // Whether the user gave ttl (--ttl, or a config file): a store whose lease length the server
  // bounds (ZooKeeper's session timeout) may take its own for the default, never for a given one.
  bool ttl_given = true;
  // Who asks, shown to others by status and in conflict messages. With value set, a candidate
  // of dlock elect: taking the lock wakes the leader watchers (WaitMode::leader), and a store
  // that shares its layout with other clients' elections shows them value as its proposal.
  HolderInfo holder;
  WaitTicket ticket;   // registers the caller as a waiter in the same step when it is held
  ReplicaAck ack;      // when taken: replicas that must have it
  LockKind kind{};     // exclusive, shared, or a slot of a semaphore
  LockPolicy policy{}; // --min-hold, --lock-delay, --replace, --supersede
};

// The outcome of one acquisition attempt.
struct AcquireResult {
  // When not acquired: what is known of the holder's lease, or why a free lock was not taken.
  enum class Lease {
    ends,         // the holder's lease ends in holder_ttl (0: not known)
    no_expiry,    // held without a TTL: by a session or a process, or by data dlock did not write
    fair_queue,   // free, but earlier --fair waiters go first
    writer_first, // free, but a waiting exclusive holder goes before new shared ones
    min_hold,     // held by a holder whose command ended, for its --min-hold: in holder_ttl
    lock_delay,   // free, but the last lease (holder) ended without a release: in holder_ttl
  };

  bool acquired = false;
  std::int64_t fence = 0;     // when acquired: this holder's fencing token
  Lease lease = Lease::ends;  // when not: see Lease
  util::Millis holder_ttl{0}; // when not, and lease ends: what is left of it
  HolderInfo holder;          // when not: who holds it (may be empty)
  std::int64_t holders = 0;   // when not: how many --shared or --limit holders have it
  // When not: the key is held as another kind, which this one cannot share (nothing was
  // registered; the caller's mistake, not a wait).
  std::optional<LockKind> kind_in_use;
  util::Millis block{0}; // when not: how long to wait for a wake-up before retrying
  // When not, with policy.supersede: a newer --supersede waiter arrived (who, as it recorded
  // itself); this waiter is no longer registered and gives up.
  std::optional<HolderInfo> superseded_by;
  // When not, with policy.replace: the holder was asked to stand down (it sees it at its next
  // renewal); the waiter waits for its release.
  bool replace_asked = false;
  // When acquired across several nodes (Redlock): the part of the TTL left when the majority
  // had answered, less the clock drift; nullopt: the whole TTL.
  std::optional<util::Millis> validity;
};

// The outcome of one attempt at a gate (start_gate), or of a barrier party's withdrawal.
struct GateResult {
  // watch: the lock is free, or was freed since ticket.since; barrier: this party's
  // generation tripped (all parties arrived); latch: the count is zero; leader: the term is
  // not ticket.since (leadership passed, or began, or ended).
  bool open = false;
  util::Millis block{0}; // when not: how long to wait for a wake-up before asking again
  // watch: the ticket's since for the next attempt. leader: the term now (open or not), a number
  // that changes whenever the lock passes to another holder: the holder's fencing token (for
  // another client's holder, what would be its fence: etcd's create revision, ZooKeeper's
  // czxid), or any other such number the store keeps; 0 when nobody holds it.
  std::int64_t since = 0;
  std::int64_t generation = 0; // barrier: the generation joined (or tripped)
  // barrier: its parties; when not open and not those asked for, another barrier of that
  // many parties is in progress on the key (nothing was registered: the caller's mistake).
  std::int64_t parties = 0;
  std::int64_t arrived = 0; // barrier: parties arrived so far, this one included
  std::int64_t count = -1;  // latch: the count left (-1: no latch is set)
  // watch, leader, when held: who holds it (lease, holder_ttl, holder with its value, holders)
  AcquireResult lock;
};

// One renewal: extend the lease if token still holds it.
struct RenewRequest {
  std::string token;
  std::optional<util::Millis> ttl; // nullopt: the holder's own lease length
  bool remember_ttl = false;       // ttl becomes the holder's lease length (`renew --ttl`)
  ReplicaAck ack;                  // when extended: replicas that must have it
  // Whether the token holds a --shared or --limit slot rather than the lock alone: the lock
  // alone is renewed through its own key only, which a Redis Cluster serves throughout a slot
  // migration (see renew_any for a caller that does not know).
  bool slot = false;
};

// What a started operation came to, in the order operations were started.
struct Outcome {
  // disconnected: the store dropped a connection while nothing was in flight (a restart, a
  // failover, an idle timeout); a holder should confirm its lease soon instead of at its next
  // turn. It carries the error that was seen; or, with replaced_by set (whom, if the push
  // said), the store pushed word of a --replace request, and lease_ended has it confirm now.
  enum class Op {
    acquire,
    wait_for_wake,
    renew,
    release,
    withdraw,
    raise_fence,
    disconnected,
    gate,
    set_latch,
    count_down, // wait, barrier, latch
    record,     // an event appended to a lock's history (History::start_record)
  };

  Op op = Op::acquire;
  std::optional<Error> error{}; // the store did not answer, or refused (its exit code inside)
  bool held = false;            // renew, release: the token held the lock
  AcquireResult acquire{};      // acquire
  // With a ReplicaAck, once the write was made: how many replicas acknowledged it in time.
  std::optional<int> replicas_acknowledged{};
  bool slot = false; // renew: the token holds a --shared or --limit slot, not the lock alone
  // gate; withdraw of a barrier party (open: it tripped before the withdrawal, which then
  // withdrew nothing); count_down (count: what is left, -1: no latch).
  GateResult gate{};
  // disconnected: the connection was the lease (a database session), so the lock went with
  // it; the holder confirms at once instead of after a retry interval.
  bool lease_ended = false;
  // renew, not held: a --replace acquirer asked this holder to stand down (who it is); the
  // lease was not extended, the lock is still the token's until it releases or it expires.
  // disconnected: see there.
  std::optional<HolderInfo> replaced_by{};
  // release, held: the lock stays taken this much longer, for the holder's --min-hold.
  util::Millis kept_for{0};

  // op's answer that says no more than done, or failed with error.
  static Outcome of(Op op, std::optional<Error> error = std::nullopt)
  {
    return Outcome{.op = op, .error = std::move(error)};
  }
  // A renewal's or release's answer: whether the token held the lock.
  static Outcome holding(Op op, bool held) { return Outcome{.op = op, .held = held}; }
};

// What a store is, as the commands above it need to know it: one value per store.
struct StoreTraits {
  // The store as messages name it: "Redis", "Redlock (several --url)", "PostgreSQL (postgres://)".
  std::string name;
  // What it can do correctly beyond one exclusive lock with a lease (lock::require refuses the
  // rest): one Redis server can do all; independent masters (Redlock) cannot agree on a queue,
  // a count or a state; a database session cannot outlive its process.
  FeatureSet features{};
  // How far the clocks of the store's nodes may run apart over a lease: a part of the TTL
  // (in %) plus a margin; a holder counts its lease as ending that much earlier (Redlock: 1% of
  // the TTL + 2 ms; one server: none).
  int drift_percent = 0;
  util::Millis drift_margin{0};
  // What becomes of a lock whose release did not get through, for the warning that says so
  // ("{ttl}" stands for the lease's TTL): a lease ends with its TTL; a database session's
  // lock, when the server ends the session.
  std::string left_behind = "it expires within {ttl}";
  // How a lock is lost in this store, for the message that says it was: a lease expires; a
  // database session's lock goes with the session.
  std::string loss_cause = "it expired or was released by someone else";

  // The clock drift over a lease of ttl.
  util::Millis clock_drift(util::Millis ttl) const
  {
    return ttl * drift_percent / 100 + drift_margin;
  }
  // left_behind, said of a lease of ttl.
  std::string left_behind_after(util::Millis ttl) const;
};

// Waiters that take nothing (dlock wait, barrier, latch): what a store offers when it keeps
// one state per name besides the lock (Store::coordination, Feature::coordinate).
class Coordination {
public:
  virtual ~Coordination() = default;
  // One attempt at the gate request.ticket.mode names (Outcome::gate): open, or, in the same
  // step, the waiter is registered so that whatever opens it wakes it (start_wait_for_wake);
  // a barrier's last arrival wakes the other parties before its outcome comes.
  virtual void start_gate(const LockName& name, const GateRequest& request) = 0;
  // Sets the lock name's count-down latch to count, expiring after expire (so nothing is left
  // forever); a latch set before starts again.
  virtual void start_set_latch(const LockName& name, std::int64_t count, util::Millis expire) = 0;
  // Counts the latch down by one (Outcome::gate.count: what is left, -1 if none is set); at
  // zero it wakes every waiter and stays there until it expires.
  virtual void start_count_down(const LockName& name) = 0;
};

// The lock protocol of one store, non-blocking: start operations, let an EventLoop watch the
// store's descriptors, and take outcomes as they arrive. Commands drive locks only through
// this interface, so that a new store or topology is one more implementation of it.
class Store {
public:
  virtual ~Store() = default;

  // Starting an operation never blocks (a store may connect lazily here); its Outcome comes
  // from next_outcome(). A store that cannot even be reached answers with an error Outcome.

  // One attempt to take the lock; if held, registers the waiter per request.ticket.
  virtual void start_acquire(const LockName& name, const AcquireRequest& request) = 0;
  // Waits up to block for a release to wake this waiter; the outcome comes either way.
  virtual void start_wait_for_wake(const LockName& name, const WaitTicket& ticket,
                                   util::Millis block) = 0;
  // Extends the lease if the token still holds it (Outcome::held).
  virtual void start_renew(const LockName& name, const RenewRequest& request) = 0;
  // Deletes the lock if token holds it (any holder if token is empty: --force) and wakes one
  // waiter (Outcome::held: whether it was held). A holder's --min-hold not yet over keeps it
  // (Outcome::kept_for) unless forced; a forced release starts the holder's --lock-delay.
  virtual void start_release(const LockName& name, const std::string& token) = 0;
  // Forgets a waiter that gives up (registrations also expire on their own); a barrier party's
  // arrival is withdrawn only if its barrier has not tripped (Outcome::gate.open if it had).
  virtual void start_withdraw(const LockName& name, const WaitTicket& ticket) = 0;

  // Has loop watch whatever the store waits on, for one round.
  virtual void watch(util::EventLoop& loop) = 0;
  // The next outcome that has arrived, if any.
  virtual std::optional<Outcome> next_outcome() = 0;
  // Drops everything in flight (after a timeout, or when another process used the store's
  // connections); no outcome comes for it, and the next operation starts afresh.
  virtual void abandon() noexcept = 0;
  // Abandons everything in flight and says what timed out, for a caller whose deadline passed.
  virtual Error timed_out() noexcept = 0;
  // Caps the time a connection attempt may block (a TLS handshake is not driven by poll); a
  // store whose connections never block (a database's, etcd's, a file's) ignores it.
  virtual void limit_blocking(util::Millis limit) noexcept { (void)limit; }

  // What the store is and can do: its name, features, clock drift and how a lease ends.
  virtual const StoreTraits& traits() const noexcept = 0;
  // The store's waiters that take nothing (wait, barrier, latch; Feature::coordinate), whose
  // outcomes come from next_outcome() with the others; nullptr when it has none.
  virtual Coordination* coordination() noexcept { return nullptr; }
  // The store's keeper of each lock's history (Feature::history), whose outcomes come from
  // next_outcome() with the others; nullptr when it keeps none.
  virtual History* history() noexcept { return nullptr; }
  // Descriptors the command inherits while the locks are held: file://'s lock files, as
  // flock(1) gives them to its command; every other descriptor of dlock's is closed for it.
  virtual std::vector<int> inherited_descriptors() const { return {}; }
  // Descriptors whose close ends a held lock (a database session's socket), which the guard
  // keeps open till the command's tree is dead: a dlock killed outright must not free the lock
  // while its command still runs. A lease's store has none.
  virtual std::vector<int> lease_descriptors() const { return {}; }

  // One lock's state (blocking until deadline).
  virtual LockStatus status(const LockName& name, util::TimePoint deadline) = 0;
  // Every held lock whose name matches the glob, sorted by name; each request gets timeout.
  virtual std::vector<LockStatus> list(std::string_view pattern, util::Millis timeout) = 0;
};

// Blocking renewal of a token whose kind of hold is unknown (`dlock renew`, a nested run's
// check): the lock alone first, else a slot; the outcome of the one that held, or the last.
Outcome renew_any(Store& store, const LockName& name, RenewRequest request,
                  util::Millis request_timeout);

// Blocking use of a Store: waits in an EventLoop until deadline for the outcome of the last
// operation started, an op one (outcomes of earlier operations, such as a renewal still in
// flight, are passed over); throws its error, or the store's timed_out() at the deadline.
Outcome await_outcome(Store& store, Outcome::Op op, util::TimePoint deadline);

} // namespace dlock::lock
