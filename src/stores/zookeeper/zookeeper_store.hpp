#pragma once

#include "lock/outcome_queue.hpp"
#include "lock/store.hpp"
#include "stores/config.hpp"
#include "stores/zookeeper/client.hpp"
#include "stores/zookeeper/nodes.hpp"
#include "stores/zookeeper/url.hpp"

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>

namespace dlock::zookeeper {

// The ensemble of a zk:// URL; --password-file wins over a password in the URL.
ZkUrl connect_params(const std::string& url, const stores::StoreConfig& config);

// Locks as Apache Curator's lock recipes lay them out (nodes.hpp), so that dlock and Curator
// users share locks: an exclusive lock is a -lock-/-__WRIT__ pair that every Curator lock
// recipe on the path waits for, --shared a read lock, --limit N InterProcessSemaphoreV2's
// leases; barrier is DistributedDoubleBarrier's layout, wait a watch on the holders' nodes,
// latch a versioned node. A candidate of dlock elect is an exclusive contender whose "lock-" node
// and a third "latch-" node have its --value, the participant id that Curator's LeaderSelector
// and LeaderLatch read (nodes.hpp); leader --watch reads the queue's head (its czxid is the term)
// with a watch on the lock node's children, set in the same request. The lease is the ZooKeeper
// session: its timeout is the TTL (the server must grant exactly a given --ttl; the default one
// gives way to the server's bound: see check_session), its ephemeral node goes when the session
// ends (dlock exits, is killed and the session times out, or the server expires it), and a renewal
// confirms that the node still exists and belongs to this session. The holder watches its own
// node, so a `release --force` or an expired session reaches it at once; a waiter watches
// only the node before it (no herd), so the queue is first come, first served. The fencing
// token is the node's czxid: the ensemble's transaction id when it was created, increasing
// across the whole ensemble, whatever becomes of the lock's node in between.
//
// The cron and CI policies outlive the session in side nodes beside the contenders (nodes.hpp),
// which every dlock honours and Curator's recipes sort after every contender: dlock.policy,
// written by a holder with --min-hold or --lock-delay (persistent: hold_until is its ctime +
// min_hold_ms; released=1 when its command ended; ended_at stamped by the first dlock that finds
// its holder gone unreleased, or by release --force), checked by each new head of the queue,
// which gives the head back while it closes the lock; dlock.replace, a --replace's request against
// the holder's node (persistent, the holder's renewal and an exists-watch see it, its release
// removes it); dlock.supersede, the newest --supersede waiter (ephemeral, its session's), which
// older ones watch. The server's time is the ctime of an ephemeral dlock.now-<uuid> node made for
// it. ZooKeeper keeps no TTL by default: a side node is removed by the next dlock that finds it
// over (an acquirer, status, release --force), and one dlock did not write is passed over.
//
// A lock's history lies outside the lock's node (nodes.hpp: history_suffix), one persistent
// sequential node per event: the create and a listing of the log go together (the session's
// requests are answered in order, so the listing has the new event), then the events past
// max_history_events or older than history_keep (by their names) are deleted, oldest first.
// With no TTL nodes (the servers' extendedTypesEnabled is off by default), a log nobody writes
// again stays; its node is a container, which the server deletes once its last event is.
// Records run one after the other, answered in order.
class ZookeeperStore final : public lock::Store, public lock::Coordination, public lock::History {
public:
  ZookeeperStore(ZkUrl url, util::Millis request_timeout, std::string prefix);
  // Lets a history event still being written finish (at most the request timeout).
  ~ZookeeperStore() override;
  ZookeeperStore(const ZookeeperStore&) = delete;
  ZookeeperStore& operator=(const ZookeeperStore&) = delete;

  void start_acquire(const lock::LockName& name, const lock::AcquireRequest& request) override;
  void start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                           util::Millis block) override;
  void start_renew(const lock::LockName& name, const lock::RenewRequest& request) override;
  void start_release(const lock::LockName& name, const std::string& token) override;
  void start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket) override;
  // wait, barrier and latch (nodes.hpp: where each keeps its nodes), woken by watches.
  lock::Coordination* coordination() noexcept override { return this; }
  lock::History* history() noexcept override { return this; }
  void start_record(const lock::LockName& name, const std::string& text) override;
  std::vector<std::string> events(const lock::LockName& name, std::size_t limit,
                                  util::TimePoint deadline) override;
  void start_gate(const lock::LockName& name, const lock::GateRequest& request) override;
  void start_set_latch(const lock::LockName& name, std::int64_t count,
                       util::Millis expire) override;
  void start_count_down(const lock::LockName& name) override;

  void watch(util::EventLoop& loop) override;
  std::optional<lock::Outcome> next_outcome() override;
  // Holding a lock: keeps the session and every node (the next attempt finds them again).
  // Holding none: closes the session, which deletes this process's queued nodes at once.
  void abandon() noexcept override;
  Error timed_out() noexcept override;
  void limit_blocking(util::Millis) noexcept override {}

  // Exclusive, shared (Curator's read/write lock), --limit (its semaphore), the fair queue,
  // wait/barrier/latch and the four policies; no lock outlives its session's process (but for
  // a --min-hold, in its side node): acquire needs --keep.
  const lock::StoreTraits& traits() const noexcept override;

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

private:
  using Op = lock::Outcome::Op;

  // One lock name's contender node, if any, and what it holds.
  struct Named {
    std::string dir;          // the lock's node: chroot + "/" + encoded prefix + name
    std::string uuid;         // protected-mode id of this process's contender
    std::string node;         // our contender's full path ("" when none)
    std::string partner;      // an exclusive contender's "__WRIT__" node (nodes.hpp)
    std::string latch;        // a candidate's "latch-" node (nodes.hpp)
    std::string lease;        // --limit: our lease while we wait under the mutex (held: node)
    std::int64_t session = 0; // the session that made node
    std::int64_t fence = 0;   // node's czxid
    std::string token;
    lock::LockKind kind{};
    lock::AcquireRequest request; // of the last acquisition
    bool held = false;
    bool creating = false;                  // a create is in flight
    bool maybe_created = false;             // a create whose answer was lost: look for uuid first
    std::string watching;                   // the node waited for (a waiter)
    bool woken = false;                     // it changed since the last attempt
    std::optional<util::TimePoint> wake_by; // a wait_for_wake in progress ends then
    int attempts = 0;                       // steps of the current acquisition (bounds its retries)
    std::vector<std::string> side_watches;  // side nodes watched while waiting (policy, newest)
    bool replace_clear = false; // held: no replace node since the last look set its watch
  };

  // One waiter that takes nothing (wait, barrier, latch --wait, leader --watch) on a lock name.
  struct Gate {
    std::string dir;                        // the lock's node
    std::vector<std::string> watched;       // the nodes whose change wakes it
    bool woken = false;                     // one changed since the last attempt
    std::optional<util::TimePoint> wake_by; // a wait_for_wake in progress ends then
    std::string member;                     // barrier: our party's node ("" when none)
    std::int64_t joined = 0;                // barrier: its czxid, the generation joined
  };

  // What inspect() found under a lock's node.
  struct Inspection {
    std::optional<Error> error;
    std::vector<Contender> queue;
    std::vector<std::size_t> holding;
    bool leases = false;                   // a semaphore's: paths are its leases
    std::vector<std::string> paths;        // the holders' nodes, under the lock's node
    std::vector<std::string> records;      // of paths, the nodes with their records (record_of)
    int limit = 0;                         // a semaphore's N, as a dlock lease says (0: unknown)
    std::vector<lock::HolderInfo> holders; // of paths, in order
    std::vector<std::string> fingerprints; // their tokens' fingerprints
  };

  Gate& gate(const lock::LockName& name);
  // The gate's answer when not open: watches paths (their change wakes it) first.
  void close_gate(const std::string& key, std::vector<std::string> paths, lock::GateResult result);
  void watch_gate(const std::string& key, const lock::GateRequest& request);
  void barrier_gate(const std::string& key, const lock::GateRequest& request);
  // A barrier party made: whether its generation tripped, else whether it trips it.
  void barrier_judge(const std::string& key, const lock::GateRequest& request, int tries = 0);
  void latch_gate(const std::string& key, util::Millis block);
  // dlock leader --watch: the term is the czxid of the queue's head (0: none), read with a watch
  // on the lock node's children (or, with no lock node, on its creation) set in the same
  // request, so that any contender made or gone after the look wakes the watcher. tries: looks
  // again when the head went meanwhile.
  void leader_gate(const std::string& key, const lock::GateRequest& request, int tries = 0);
  // Answers a leader gate: open when term is not the ticket's since; holder when held.
  void answer_leader(const lock::GateRequest& request, std::int64_t term,
                     std::optional<lock::HolderInfo> holder, std::int64_t holders);
  void count_down(const std::string& key, int tries);
  Named& named(const lock::LockName& name);
  Named* find(const lock::LockName& name);
  std::string dir_of(const lock::LockName& name) const;
  // The session, started (asking for session_timeout) if there is none that can be used.
  Client& client(util::Millis session_timeout);
  // Runs then once the session is up (error: it could not be).
  void when_ready(std::function<void(std::optional<Error>)> then);
  void on_event(const WatchEvent& event);
  // Refuses a given TTL the server's session timeout does not match; takes the server's for
  // the default one (not given), which -v says.
  std::optional<Error> check_session(util::Millis ttl, bool given);

  // The steps of an acquisition, each from the previous one's answer.
  void place(const std::string& key);
  void create(const std::string& key);
  void judge(const std::string& key);
  // judge's step once the queue's listing came (reply).
  void judge_listed(const std::string& key, Reply& reply);
  // Whether the listing (reply) makes our contender the head of a lock's queue (not a
  // semaphore's), with every node of it in place: what judge_listed would admit.
  bool heads(const std::string& key, const Reply& reply) const;
  void report_holder(const std::string& key, const std::vector<Contender>& queue);
  // The queue of a lock's node, after the check that no semaphore holds the key.
  void judge_queue(const std::string& key, const std::vector<Contender>& queue);
  // Where the contenders queue: the lock's node, or a semaphore's mutex.
  std::string queue_dir(const Named& n) const;
  // A contender's other nodes to delete with its own: its partner and latch, or a waiter's lease.
  static std::vector<std::string> others_of(const Named& n);
  // Forgets n's nodes (they are gone, or being deleted).
  static void forget_nodes(Named& n);
  // The key is held as another kind: our nodes go, and the attempt answers kind_in_use.
  void refuse_kind(const std::string& key, lock::LockKind kind);
  // --limit, with the mutex: makes our lease (once), then counts the leases.
  void take_lease(const std::string& key);
  void count_leases(const std::string& key);
  // --limit: answers not acquired, with the leases' holders.
  void report_leases(const std::string& key);
  // The head of the queue honours the last holder's policy node (give back while it closes the
  // lock), then writes its own, watches and answers.
  void admit(const std::string& key);
  // Counts admit's step (bounds its retries); false when there were too many (answered).
  bool step_admit(const std::string& key);
  // admit's reads: the policy node, then watch_held's; ahead, when sent ahead of the listing
  // that decides, is whether it made this contender the head (false: they are passed over).
  void head_reads(const std::string& key, std::shared_ptr<bool> ahead);
  // Gives the head back and answers closed for left (a waiter watches the policy node, which
  // release --force deletes, and blocks at most left).
  void refuse(const std::string& key, lock::AcquireResult::Lease lease, util::Millis left,
              const lock::HolderInfo& holder);
  // Writes this holder's policy node (--min-hold, --lock-delay), if it has one.
  void settle_in(const std::string& key);
  // Watches our node (its loss) and the replace node (a request), then answers acquired.
  // first, if any, runs on our node's answer (the fence read): false when the caller goes
  // another way, and the rest of the answers are passed over.
  void watch_held(const std::string& key, std::function<bool()> first = {});
  // admit's step once the policy node's answer came (reply).
  void honour_policy(const std::string& key, const std::string& path, Reply& reply);
  // --replace: asks the holder of the head node to stand down, then answers per not_acquired.
  void ask_replace(const std::string& key, const std::string& head, std::function<void(bool)> then,
                   int tries = 0);
  // --supersede: announces this waiter as the newest (first registration), watches the record.
  void announce(const std::string& key, std::function<void()> then);
  // Releases (by fingerprint, or forced if empty) the policy and replace nodes' part: then gets
  // how long the lock stays taken for the holder's --min-hold, and whether a forced release
  // freed a lock held only by it.
  // policy_too: false when the releasing holder wrote no policy node (only the replace node is
  // read then).
  void settle_release(const std::string& dir, const std::string& fingerprint,
                      const std::string& node, std::function<void(util::Millis, bool)> then,
                      int tries = 0, bool policy_too = true);
  // The server's time (ms): the ctime of a node made for it (this host's clock if it cannot).
  void server_now(const std::string& dir, std::function<void(std::int64_t)> then);
  // Creates path's missing ancestors and itself (the lock's node as a container, which the
  // server deletes once empty, as Curator does; the chroot's nodes as persistent ones).
  // containers: how many of the last levels are containers (a semaphore's mutex or leases
  // and the lock's node: 2).
  void make_path(const std::string& path, std::function<void(std::optional<Error>)> then,
                 std::size_t containers = 1);
  void create_paths(std::shared_ptr<std::vector<std::string>> paths, std::size_t i,
                    std::size_t containers, std::function<void(std::optional<Error>)> then);
  // What is under a lock's node: the queue and its holders' records.
  void inspect(const std::string& dir, std::function<void(Inspection&)> then);
  void read_holders(const std::string& dir, std::shared_ptr<Inspection> found,
                    std::function<void(Inspection&)> then);
  // Deletes a contender's node and its others (others_of: in one transaction when all are
  // there, else each alone); then gets the node's answer.
  void remove_contender(const std::string& node, std::vector<std::string> others,
                        Client::Done then);
  // Deletes paths one by one; then gets how many were there.
  void remove_all(std::vector<std::string> paths,
                  std::function<void(int, std::optional<Error>)> then, int removed = 0);

  // The error of a failed request, with the exit code its return code means.
  Error error_of(int rc, std::string_view what) const;
  // A lock no contender holds, closed by the last holder's policy node (--min-hold: held, its
  // command ended; --lock-delay: delay_ms); starts the delay or removes a node that is over.
  void policy_status(const lock::LockName& name, const std::vector<Contender>& queue,
                     lock::LockStatus& status, util::TimePoint deadline);
  // Runs the loop until done or deadline (status, list).
  void block_until(const bool& done, util::TimePoint deadline);

  // A history event waiting for the one before it to be written.
  struct Record {
    std::string name;
    std::string text;
  };
  std::string history_of(const lock::LockName& name) const
  {
    return dir_of(name) + std::string(history_suffix);
  }
  // Writes the first queued record (none in flight); its answer starts the next.
  void next_record();
  // The event's create with the log's listing; made: after the log's node was made.
  void append(const std::string& log, const std::string& text, bool made);
  // Deletes the events the listing (reply) shows past the cap or expired, then answers.
  void trim(const std::string& log, const Reply& listing);
  void recorded(std::optional<Error> error);

  ZkUrl m_url;
  std::deque<Record> m_records; // the first one is in flight when m_recording
  bool m_recording = false;
  util::Millis m_request_timeout;
  std::string m_prefix;
  std::unique_ptr<Client> m_client;
  util::Millis m_asked_timeout{0}; // the session timeout m_client asked for
  bool m_was_connected = false;    // m_client's session came up once
  bool m_dead = false;             // m_client's session expired or its authentication failed
  bool m_told_granted = false;     // -v said once that the server's session bound is the lease
  // Since when m_client has been cut off from the ensemble (nullopt: connected).
  std::optional<util::TimePoint> m_cut_off_since;
  std::vector<std::function<void(std::optional<Error>)>> m_on_ready;
  std::map<std::string, Named> m_named; // by lock name
  std::map<std::string, Gate> m_gates;  // by lock name
  lock::OutcomeQueue m_answers;
};

} // namespace dlock::zookeeper
