#pragma once

#include "lock/outcome_queue.hpp"
#include "lock/store.hpp"
#include "stores/redis/node.hpp"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dlock::redis {

// Redlock: one lock across N independent Redis masters, held while a majority (N/2+1) holds
// it. Every operation goes to every node at once, through one event loop; each node's answer
// counts only if it comes within a short per-node timeout, and the lock is held only if a
// majority granted it with time to spare (the validity: TTL - elapsed - clock drift).
class RedlockStore final : public lock::Store {
public:
  // nodes: one single-server store per master, in the order the URLs were given; names: how
  // each is shown in messages (its redacted URL).
  RedlockStore(std::vector<std::unique_ptr<Node>> nodes, std::vector<std::string> names);

  void start_acquire(const lock::LockName& name, const lock::AcquireRequest& request) override;
  void start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                           util::Millis block) override;
  void start_renew(const lock::LockName& name, const lock::RenewRequest& request) override;
  void start_release(const lock::LockName& name, const std::string& token) override;
  void start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket) override;

  void watch(util::EventLoop& loop) override;
  std::optional<lock::Outcome> next_outcome() override;
  void abandon() noexcept override;
  Error timed_out() noexcept override;
  void limit_blocking(util::Millis limit) noexcept override;

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

  // One queue of waiters, a count of holders, whether a lock was freed, who arrived at a
  // barrier, a latch's count: each one state, which independent masters cannot agree on
  // without consensus (no coordination either). A lease outlives the process, as on one
  // server. The nodes' clocks drift apart by 1% of the TTL + 2 ms.
  const lock::StoreTraits& traits() const noexcept override;

  // How long one node may take to answer one request: a fiftieth of the TTL, from 50 ms to
  // 500 ms (small against the TTL, as the algorithm asks, yet room for a fresh connection).
  static util::Millis node_timeout(util::Millis ttl);
  // How many nodes make a majority.
  std::size_t quorum() const noexcept { return m_nodes.size() / 2 + 1; }

private:
  using Op = lock::Outcome::Op;

  // One operation started on every node, and what each answered.
  struct Request {
    std::uint64_t id = 0;
    Op op = Op::acquire;
    bool internal = false; // a clean-up or re-join nobody waits for
    util::TimePoint sent_at{};
    util::TimePoint node_deadline{}; // a node that has not answered by then has failed
    std::vector<std::optional<lock::Outcome>> answers{};
    // Per node: passed over (not asked, or its wait ended elsewhere), so no answer comes and
    // none counts, for or against.
    std::vector<bool> passed{};
    // Whether every node answered or was passed over.
    bool all_in() const;
    bool decided = false;
    std::optional<lock::LockName> name{};
    lock::AcquireRequest acquire{}; // acquire: what was asked (to undo it, to re-join)
    std::string token{};            // renew, release
  };

  // Starts a request on every node (start(node, i) sends it to node i).
  template<typename Start>
  Request& begin(Op op, const lock::LockName& name, util::Millis timeout, bool internal,
                 Start start);
  // The same, on the nodes asked[i] only; the others count as having answered nothing.
  template<typename Start>
  Request& begin_on(const std::vector<bool>& asked, Op op, const lock::LockName& name,
                    util::Millis timeout, bool internal, Start start);
  // Takes the nodes' outcomes, times out late nodes, and decides what can be decided.
  void collect();
  // The outcome of request, if its answers decide it already.
  std::optional<lock::Outcome> decide(Request& request, bool all_in);
  std::optional<lock::Outcome> decide_acquire(Request& request, bool all_in);
  std::optional<lock::Outcome> decide_renew(Request& request, bool all_in);
  std::optional<lock::Outcome> decide_release(Request& request, bool all_in);
  // Takes the outcomes a node has delivered, as answers to the requests it owes, in order.
  void take_answers(std::size_t node);
  // Gives a node up for the requests it still owes: failed with error (after a timeout), or
  // passed over (nullopt: a wait that ended elsewhere).
  void drop_node(std::size_t node, const std::optional<Error>& error);
  // Releases token on every node, for nobody (an acquisition that did not reach a majority).
  void undo_acquire(const Request& request);
  // Takes the lock again, with the same token, on nodes that lost it (a restart).
  void rejoin(const lock::LockName& name, const std::vector<std::size_t>& nodes);
  // "3 of 5 nodes granted it; redis://b:6379: timed out; ..." for messages.
  std::string tally(const Request& request, std::string_view verb) const;
  // One lock's status from what the nodes said: held if a majority name one holder.
  static lock::LockStatus combine(const std::string& name,
                                  const std::vector<lock::LockStatus>& views,
                                  std::vector<lock::NodeView> nodes, std::size_t quorum);

  std::vector<std::unique_ptr<Node>> m_nodes;
  std::vector<std::string> m_names;
  std::vector<std::deque<std::uint64_t>> m_owed; // per node: requests it has not answered
  std::deque<Request> m_requests;                // oldest first, until every node answered
  lock::OutcomeQueue m_answers;
  std::uint64_t m_next_id = 1;
  bool m_disconnected = false; // a node dropped an idle connection: tell the holder once
  std::size_t m_wait_node = 0; // where a waiter blocks: the first node that named the holder
  // The acquisitions that succeeded, by lock name: re-joining a node needs the request.
  std::map<std::string, lock::AcquireRequest> m_held;
};

} // namespace dlock::redis
