#pragma once

#include "lock/outcome_queue.hpp"
#include "lock/store.hpp"
#include "stores/redis/cluster.hpp"
#include "stores/redis/connection.hpp"
#include "stores/redis/keys.hpp"
#include "stores/redis/node.hpp"
#include "stores/redis/sentinel.hpp"

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>

namespace dlock::redis {

// The lock protocol on Redis (a lock is a key holding the holder's token, with the lease as
// its TTL; Lua scripts make every step atomic), over one pipelined connection per node. The
// URL's server (or the master Sentinel names) is the first node; if it turns out to be a
// Cluster node, requests follow MOVED and ASK to the node serving the lock's slot, and all
// of one lock's keys share that slot.
class RedisStore final : public Node, public lock::Coordination, public lock::History {
public:
  // switches: for a master found through Sentinel, the announcements of its failovers.
  RedisStore(ConnectOptions options, std::string prefix,
             std::unique_ptr<SwitchListener> switches = nullptr);

  void start_acquire(const lock::LockName& name, const lock::AcquireRequest& request) override;
  void start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                           util::Millis block) override;
  void start_renew(const lock::LockName& name, const lock::RenewRequest& request) override;
  void start_release(const lock::LockName& name, const std::string& token) override;
  void start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket) override;
  void start_raise_fence(const lock::LockName& name, std::int64_t at_least) override;
  void start_give_back(const lock::LockName& name, const std::string& token) override;
  // Redis does every feature (Feature): a Cluster or Sentinel is still one store.
  lock::Coordination* coordination() noexcept override { return this; }
  void start_gate(const lock::LockName& name, const lock::GateRequest& request) override;
  void start_set_latch(const lock::LockName& name, std::int64_t count,
                       util::Millis expire) override;
  void start_count_down(const lock::LockName& name) override;
  // A stream per lock beside its other keys (LockKeys::history), written by one script that is
  // pipelined with the rest (an acquired event goes out with the first renewals).
  lock::History* history() noexcept override { return this; }
  void start_record(const lock::LockName& name, const std::string& text) override;
  // A key of another type gives no events (and a verbose note), never an error.
  std::vector<std::string> events(const lock::LockName& name, std::size_t limit,
                                  util::TimePoint deadline) override;

  void watch(util::EventLoop& loop) override;
  std::optional<lock::Outcome> next_outcome() override;
  void abandon() noexcept override;
  Error timed_out() noexcept override;
  void limit_blocking(util::Millis limit) noexcept override;

  const lock::StoreTraits& traits() const noexcept override;

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

  // This server is one of several independent masters (Redlock): a Cluster's redirect is
  // refused (usage) rather than followed, since one lock would then live on one store; and
  // every script goes with its body (EVAL, which Redis caches by hash all the same), since
  // dlock decides on a majority and may have moved on, or exited, when this node answers.
  void join_redlock() noexcept { m_redlock_node = true; }

private:
  // start_release, or start_give_back (at_once: no --min-hold kept).
  void send_release(const lock::LockName& name, const std::string& token, bool at_once);
  // A command sent whose reply is still owed, and what to make of it.
  struct Pending {
    lock::Outcome::Op op = lock::Outcome::Op::acquire;
    std::vector<std::string> argv{}; // as sent, to send again after a redirect or TRYAGAIN
    std::vector<std::string> eval{}; // a script's EVAL form, sent again after NOSCRIPT
    int slot = -1;                   // the slot of its keys; -1: the first node's business
    bool last = true;                // false: a step of the op whose outcome comes later
    lock::ReplicaAck ack{};          // replicas the write must reach before its outcome counts
    // The outcome, held back while a follow-up step is answered: the WAIT for the write's
    // replicas (its count goes into the outcome), or the wake-up of the --fair waiter a
    // release let in.
    std::optional<lock::Outcome> held_back{};
    bool counts_replicas = false; // held_back waits for a WAIT's count
    int redirects = 0;            // MOVED and ASK met so far
    int try_agains = 0;           // TRYAGAIN met so far
    // Where the waiters this request may wake have their own lists: a release, the lock's
    // LockKeys::fair_wake_prefix; a barrier arrival, its LockKeys::barrier_wake_prefix.
    std::string wake_prefix{};
    bool slot_renewal = false;                       // a renewal of a --shared or --limit slot
    lock::WaitMode gate_mode = lock::WaitMode::once; // gate, withdraw: whose gate
  };
  // Waiters a request's outcome says to wake on a list of their own (a --fair waiter let in,
  // the other parties of a barrier that tripped), which its script could not declare.
  struct WakeUp {
    std::string list;
    std::int64_t count = 1;
  };
  // One server and the replies it owes.
  struct Node {
    explicit Node(ConnectOptions options) : connection(std::move(options)) {}
    Connection connection;
    std::deque<Pending> pending;
  };
  // A request waiting out a TRYAGAIN.
  struct Retry {
    util::TimePoint at;
    Pending pending;
  };

  LockKeys keys(const lock::LockName& name) const { return LockKeys::make(m_prefix, name.str()); }
  // Turns a reply into its operation's outcome, and says whom it wakes (a --fair waiter a
  // release let in, the parties of a barrier that tripped).
  lock::Outcome make_outcome(const Pending& pending, const redisReply& reply,
                             std::optional<WakeUp>& wake) const;
  // Sends to the node serving pending.slot, or to node if given (an ASK, a WAIT).
  void send(Pending pending, Node* node = nullptr);
  Node& node_for_slot(int slot);
  Node& node_at(const std::string& host, int port);
  void on_io(Node& node, short revents);
  void on_reply(Node& node, const redisReply& reply);
  // The outcome of a request, or its next step (WAIT, a wake-up) first.
  void finish(Node& node, Pending& pending, lock::Outcome outcome,
              const std::optional<WakeUp>& wake);
  // Sends pending where a MOVED or ASK says; false after too many redirects.
  bool follow(Pending& pending, const Redirect& redirect);
  void fail(const Pending& pending, const Error& error);
  void fail_all(Node& node, const Error& error);
  // The node stopped being the master (READONLY, a Sentinel's announcement): drops the
  // connection, failing what is in flight, so that the next operation finds the master anew.
  void leave_node(Node& node, const Error& error);
  // Runs read on the node serving slot, blocking, following MOVED and ASK (read throws
  // Redirected for them).
  void at_slot(int slot, util::TimePoint deadline, const std::function<void(Connection&)>& read);
  // The masters of a cluster (and the slot map learned on the way); empty if not a cluster.
  std::vector<Node*> cluster_masters(util::Millis timeout);

  std::vector<std::unique_ptr<Node>> m_nodes; // [0]: the URL's server or Sentinel's master
  std::map<int, Node*> m_slot_nodes;          // slots learned from MOVED and CLUSTER SLOTS
  std::unique_ptr<SwitchListener> m_switches; // null unless through Sentinel
  std::string m_prefix;
  lock::OutcomeQueue m_answers;
  std::vector<Retry> m_retries;
  util::Millis m_blocking_limit = util::Millis::max();
  bool m_redlock_node = false;
};

} // namespace dlock::redis
