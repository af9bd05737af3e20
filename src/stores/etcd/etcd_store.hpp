#pragma once

#include "lock/outcome_queue.hpp"
#include "lock/store.hpp"
#include "stores/config.hpp"
#include "stores/etcd/api.hpp"
#include "stores/etcd/client.hpp"

#include <sys/types.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dlock::etcd {

// The store of an etcd:// URL, with the URL's password unless --password-file gave one.
std::unique_ptr<lock::Store> open(const std::string& url, const stores::StoreConfig& config);

// Locks in etcd v3, the same recipe as `etcdctl lock` (clientv3/concurrency.Mutex), so that
// the two contend on one name: a lease of the TTL, a key PFX/<lease in hex> put under it, the
// owner is the key of PFX with the lowest create revision, and a waiter watches the deletions
// of the keys before its own (a FIFO queue, fair by construction, with no herd of requests):
// an exclusive one every deletion under PFX/ (and the puts of PFX-less-slash#delay, which sorts
// just before it, in the same watch), kept from one wait to the next, taking the lock when the
// last earlier key is gone with no read (Mine::takes_over). A release deletes the key if it is
// still ours, then revokes its lease. The fencing token is the key's create revision. A
// renewal is a lease keepalive and a check of the key; a watch of the holder's own key reports
// its deletion (lease revoked) at once.
// --shared puts PFX/read/<lease hex> (the recipes' RWMutex readers), which holds while no
// exclusive key (etcdctl's, dlock's, the recipes' PFX/write/…) is older, and waits on the last
// such key; --limit N puts PFX/<lease hex> saying "limit:N" (the N oldest hold), whose waiter
// watches every deletion under PFX/. etcdctl lock waits for every key under PFX/, readers and
// slots included. `dlock acquire` leaves its lease running at exit (renew and release find the
// key by the token's fingerprint in its value).
// The cron and CI policies keep the layout (etcdctl lock honours them too where it can):
// --min-hold grants a lease of its length at acquisition (never kept alive: it ends at
// hold_until by etcd's clock) and the key sits on it while it outlasts the TTL, else moves onto
// it at a release by token (a put: same create revision, same place), marked ended; --lock-delay
// is a key PFX-less-slash#delay on a lease of the key's TTL + D kept alive with it, revoked by a
// clean release, put on a lease of D by release --force, honoured by the next owner; --replace
// puts #replace on the holder's lease, which its renewal reads; --supersede puts #newest on the
// newest waiter's lease, which the older ones watch (side_key).
// dlock elect's candidates (AcquireRequest::holder.value set) are etcdctl elect's too
// (concurrency.Election: the same queue, the oldest key leads): the key holds the plain value,
// the holder record lies beside it on the same lease, at PFX-less-slash#elect:<lease hex>
// (records_prefix_of), read with the queue in the same transaction (a plain run: one more
// range in reads it makes anyway, no round trip).
// A lock's history (history_prefix): each event a key of its own on the log's lease of
// history_keep, which every event keeps alive (a keepalive sent with the put: one round trip);
// the put's transaction counts the log and reads its oldest keys, and the ones past
// max_history_events go in one more. Records run one after the other, answered in order.
class EtcdStore final : public lock::Store, public lock::Coordination, public lock::History {
public:
  EtcdStore(EtcdUrl url, std::optional<std::string> password, stores::TlsFiles tls,
            util::Millis request_timeout, std::string prefix);
  // Revokes the leases this process still has (a waiter's, or a holder whose release did not
  // run), so that nothing waits for them to expire.
  ~EtcdStore() override;

  void start_acquire(const lock::LockName& name, const lock::AcquireRequest& request) override;
  void start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                           util::Millis block) override;
  void start_renew(const lock::LockName& name, const lock::RenewRequest& request) override;
  void start_release(const lock::LockName& name, const std::string& token) override;
  void start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket) override;

  void watch(util::EventLoop& loop) override;
  std::optional<lock::Outcome> next_outcome() override;
  // Drops the requests in flight; the keys and leases this process has stay (and the watch
  // of a held key), as a database store keeps its sessions.
  void abandon() noexcept override;
  Error timed_out() noexcept override;

  // One FIFO queue of keys per name (--fair is what it always does): exclusive, --shared and
  // --limit N holders, with --min-hold, --lock-delay, --replace and --supersede; a lock
  // outliving dlock (acquire: its lease runs on, renewed or released by token).
  const lock::StoreTraits& traits() const noexcept override;
  lock::Coordination* coordination() noexcept override { return this; }
  lock::History* history() noexcept override { return this; }
  void start_record(const lock::LockName& name, const std::string& text) override;
  std::vector<std::string> events(const lock::LockName& name, std::size_t limit,
                                  util::TimePoint deadline) override;

  // wait: the name's queue read, then a watch of its first holder's key; barrier: the parties'
  // keys NAME#party:<generation>:<lease hex> on their own leases and the state NAME#barrier
  // (generation, parties) that each arrival bumps in a transaction; the last one deletes the
  // arrivals, which the others watch; latch: NAME#latch holding the count, on a lease of its
  // expiry, counted down by a transaction on its mod revision, watched by its waiters; leader:
  // the term is the first key's create revision, watched by that key's deletion (or, with none,
  // by the puts under PFX/).
  void start_gate(const lock::LockName& name, const lock::GateRequest& request) override;
  void start_set_latch(const lock::LockName& name, std::int64_t count,
                       util::Millis expire) override;
  void start_count_down(const lock::LockName& name) override;

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

private:
  using Op = lock::Outcome::Op;
  using Outcome = lock::Outcome;
  // A key's deletion that a waiter's watch reported: clean when no --lock-delay can have begun;
  // or (delay) a put of the name's #delay key: a --lock-delay armed.
  struct Deletion {
    std::int64_t revision = 0;
    std::string key;
    bool clean = false;
    bool delay = false;
  };
  // This process's key for one lock name, held or queued.
  struct Mine {
    std::string token;
    std::string prefix; // PFX/ of the name
    std::int64_t lease = 0;
    std::int64_t ttl_s = 0;
    std::string key;           // PFX/<lease hex>
    std::int64_t revision = 0; // its create revision: the fencing token when it owns
    bool owner = false;
    lock::LockKind kind;          // exclusive, shared (PFX/read/…) or a semaphore's slot
    std::string predecessor;      // queued: the key just before ours (or a prefix)
    bool watch_range = false;     // queued: predecessor is a prefix (a semaphore)
    std::int64_t watch_from = 0;  // queued: the revision after the one that read it
    std::uint64_t own_watch = 0;  // owner: the watch of our key's deletion
    std::uint64_t wake_watch = 0; // queued: the watch of the predecessor's deletion
    std::optional<util::TimePoint> wake_by; // queued: the end of the current wait_for_wake
    std::int64_t watched_to = 0;            // owner: the last revision the own watch saw
    std::string fingerprint;                // of token, as the records carry it
    lock::HolderInfo me;                    // the record written with the key
    lock::LockPolicy policy;
    // --min-hold: a lease of its length granted at acquisition, never kept alive (it ends at
    // hold_until by the store's clock); the key is on it (on_hold) while it outlasts the TTL.
    std::int64_t hold_lease = 0;
    bool on_hold = false;
    std::int64_t delay_lease = 0; // --lock-delay: the lease of the name's #delay key
    bool replaced = false;        // a renewal found a --replace request against this token
    std::uint64_t side_watch = 0; // queued --supersede: the watch of the name's #newest key
    bool supersede = false;       // queued: a --supersede waiter (it watches #newest too)
    // Queued, exclusive, no --replace or --supersede, no #delay key seen: it watches the
    // deletions of every key before its own (before, as the read that queued it found them:
    // no key can come before it later) and takes the lock once they are gone with no read:
    // with no round trip at all while half its lease is left since it last kept it alive
    // (AcquireResult::validity says what is left), else after a keepalive. A deleted key whose
    // record armed a --lock-delay, or its own key's deletion, ends it (the next attempt reads the
    // queue).
    bool takes_over = false;
    std::set<std::string> before;
    // When the last grant or keepalive of lease was sent: it runs at least ttl_s from then.
    util::TimePoint kept_at{};
    // A take-over with no keepalive: what is left of the lease (AcquireResult::validity).
    std::optional<util::Millis> validity;
    // takes_over: the watch of the deletions under prefix, kept from one wait to the next (across
    // the reads that keep the lease alive) so that etcd serves it at once: a watch created with a
    // start revision already passed waits for etcd's catch-up loop, which runs every 100 ms.
    std::uint64_t queue_watch = 0;
    // A read of the queue is in flight: the deletions queue_watch reports meanwhile are held,
    // and those past the read's revision are taken after it (decide).
    bool reading = false;
    std::vector<Deletion> held;
  };
  // What of a gate's watched key wakes its waiter: its deletion, any change of it, or (watched
  // is a prefix) any change of a key under it.
  enum class Wakes { deletion, change, any_under };
  // This process's waiter at a gate of one lock name (wait, barrier, latch, leader): what wakes
  // it.
  struct Gate {
    std::string watched;                    // the key whose change wakes it
    Wakes wakes = Wakes::deletion;          // what of watched wakes it
    std::int64_t watch_from = 0;            // the revision after the read that found it shut
    std::int64_t party_lease = 0;           // barrier: the lease of this party's arrival key
    std::optional<util::TimePoint> wake_by; // the end of the current wait_for_wake
    std::uint64_t wake_watch = 0;
    // leader: one watch of the whole queue kept across the gate's reads (a watch made after a
    // read starts in the past, which etcd serves up to 100 ms late); the newest revision it
    // reported, the revision of the last read, and the leader key's mod revision then.
    bool kept = false;
    std::int64_t changed_at = 0, read_at = 0, leader_mod = 0;
  };
  // The side keys of a lock name, as one read finds them.
  struct Sides {
    std::optional<KeyValue> delay, replace, newest;
  };

  void fail(Op op, const Error& error) { m_answers.answer(op, error); }
  // The steps of an acquisition, each run from the previous one's answer.
  void grant(const std::string& name, const lock::AcquireRequest& request);
  void put_key(const std::string& name, const lock::AcquireRequest& request);
  void decide(const std::string& name, const lock::AcquireRequest& request,
              std::vector<Member> queue, const Sides& sides, std::int64_t revision);
  // Not acquired: fills what is left of lease (0: not asked) and answers.
  void answer_shut(const std::string& name, const lock::AcquireRequest& request, Outcome outcome,
                   std::int64_t lease);
  // Head of the queue: grants --min-hold's and --lock-delay's leases, writes them, answers.
  void arm(const std::string& name, const lock::AcquireRequest& request);
  void become_owner(const std::string& name);
  // The owner's renewal once its key was read (no --replace request against it).
  void extend(const std::string& name, const KeyValue& kv);
  // Another process's `renew --ttl`: moves kv onto a lease of ttl (Outcome::held, slot).
  void renew_with_ttl(const std::string& name, const KeyValue& kv, util::Millis ttl, bool slot);
  // Moves the key off its --min-hold lease onto one kept alive (the hold nears its end).
  void move_off_hold(const std::string& name, const KeyValue& kv);
  // The release of a key the token holds: kept on its --min-hold lease (marked ended) if that
  // is not over and no --replace asked; else its --lock-delay disarmed and its lease revoked.
  void release_held(const std::string& name, const KeyValue& kv, bool replaced);
  // The names' side keys, in the order Sides has them, and how a read answers them.
  std::vector<std::string> side_keys(const std::string& name) const;
  static constexpr std::size_t side_count = 3; // how many side_keys gives
  // Where the name's candidates keep their holder records (records_prefix_of).
  std::string records_of(const std::string& name) const
  {
    return records_prefix_of(m_prefix, name);
  }
  static Sides sides_of(const Json& txn_response, std::size_t first);
  void watch_own_key(const std::string& name);
  // A takes_over waiter's watch of the deletions under its prefix (Mine::queue_watch), from
  // watch_from on.
  void watch_queue(const std::string& name);
  // A deletion seen by a takes_over waiter: one key fewer before it, or (its own key, one that
  // may have armed a --lock-delay, a put of #delay) a read of the queue is due.
  static void take_deletion(Mine& mine, const Deletion& gone);
  // Forgets this process's key of a lock name, with its watches (not its lease).
  void forget(std::map<std::string, Mine>::iterator found);
  // A held name's status from its queue (holders, their leases, waiters), blocking to deadline.
  void fill_held(lock::LockStatus& status, const std::vector<Member>& queue,
                 util::TimePoint deadline);
  void end_wait(const std::string& name);
  // Revokes leases one after the other, then calls done (whatever came of them).
  void revoke_all(std::vector<std::int64_t> leases, std::function<void()> done);
  // Revokes lease; then calls done (whatever came of it).
  void revoke(std::int64_t lease, std::function<void(Answer&)> done);
  // The key (of this lock name) whose value has token's fingerprint, for another process's
  // renew or release; calls found with it or nullopt.
  void find_token(const std::string& name, const std::string& token,
                  std::function<void(std::optional<Error>, std::optional<Member>)> found);

  // The gates' steps (gates.cpp).
  void gate_watch(const std::string& name, const lock::GateRequest& request);
  void gate_latch(const std::string& name, const lock::GateRequest& request);
  void gate_leader(const std::string& name, const lock::GateRequest& request);
  void gate_barrier(const std::string& name, const lock::GateRequest& request);
  void barrier_arrive(const std::string& name, const lock::GateRequest& request);
  void count_down_from(const std::string& name, int tries);
  // Reads name's queue (its keys and their records) in one transaction for a gate, then calls
  // seen with it and the revision read; a failure is the gate's outcome.
  void read_queue_for_gate(const std::string& name,
                           std::function<void(std::vector<Member>, std::int64_t revision)> seen);
  // Shut: the waiter waits on watched (deletions only, or every change) from revision on.
  void gate_shut(const std::string& name, lock::GateResult result, std::string watched, Wakes wakes,
                 std::int64_t revision);
  void withdraw_party(const std::string& name, const lock::WaitTicket& ticket);
  void start_gate_wait(const std::string& name, util::Millis block);
  void end_gate_wait(const std::string& name);

  // A history event waiting for the one before it to be written.
  struct Record {
    std::string name;
    std::string text;
  };
  // Writes the first queued record (none in flight); its answer starts the next.
  void next_record();
  // The event's put (with the log's keepalive); granted: after the lease was granted.
  void append(const std::string& name, const std::string& text, bool granted);
  // Deletes the oldest events past max_history_events (oldest: the put's read of the log).
  void trim(const std::string& name, const Json& oldest);
  void recorded(std::optional<Error> error);

  Client m_client;
  std::deque<Record> m_records; // the first one is in flight when m_recording
  bool m_recording = false;
  std::string m_prefix;
  util::Millis m_timeout;
  pid_t m_pid;
  std::map<std::string, Mine> m_mine;  // by lock name
  std::map<std::string, Gate> m_gates; // by lock name
  lock::OutcomeQueue m_answers;
};

} // namespace dlock::etcd
