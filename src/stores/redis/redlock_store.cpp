#include "stores/redis/redlock_store.hpp"

#include <algorithm>
#include <random>

namespace dlock::redis {

using lock::Outcome;
using util::Millis;
using util::TimePoint;

namespace {

// Which of several holders' reports named by as many nodes Redlock passes on: the longest
// lease, then one without a TTL, then a free lock's reasons (as the scripts' numbers order them).
std::int64_t lease_rank(const lock::AcquireResult& result)
{
  switch (result.lease) {
  case lock::AcquireResult::Lease::ends:
  case lock::AcquireResult::Lease::min_hold:
  case lock::AcquireResult::Lease::lock_delay:
    return result.holder_ttl.count();
  case lock::AcquireResult::Lease::no_expiry:
    return -1;
  case lock::AcquireResult::Lease::fair_queue:
    return -2;
  case lock::AcquireResult::Lease::writer_first:
    return -3;
  }
  return -1;
}

TimePoint now() { return util::monotonic_now(); }

// A pause of 10 to 100 ms, so that contenders that split the nodes between them do not try
// again in step.
Millis random_pause()
{
  static std::minstd_rand generator(std::random_device{}());
  return Millis(std::uniform_int_distribution<int>(10, 100)(generator));
}

} // namespace

RedlockStore::RedlockStore(std::vector<std::unique_ptr<Node>> nodes, std::vector<std::string> names)
  : m_nodes(std::move(nodes)), m_names(std::move(names)), m_owed(m_nodes.size())
{
}

Millis RedlockStore::node_timeout(Millis ttl)
{
  return std::clamp(ttl / 50, Millis(50), Millis(500));
}

const lock::StoreTraits& RedlockStore::traits() const noexcept
{
  static const lock::StoreTraits traits{
    .name = "Redlock (several --url)",
    .features = lock::features_of(lock::StoreKind::redlock),
    .drift_percent = 1,
    .drift_margin = Millis(2),
  };
  return traits;
}

template<typename Start>
RedlockStore::Request& RedlockStore::begin(Op op, const lock::LockName& name, Millis timeout,
                                           bool internal, Start start)
{
  return begin_on(std::vector<bool>(m_nodes.size(), true), op, name, timeout, internal, start);
}

template<typename Start>
RedlockStore::Request& RedlockStore::begin_on(const std::vector<bool>& asked, Op op,
                                              const lock::LockName& name, Millis timeout,
                                              bool internal, Start start)
{
  Request request;
  request.id = m_next_id++;
  request.op = op;
  request.internal = internal;
  request.sent_at = now();
  request.node_deadline = request.sent_at + timeout;
  request.answers.resize(m_nodes.size());
  request.passed.resize(m_nodes.size());
  request.name = name;
  m_requests.push_back(std::move(request));
  for (std::size_t i = 0; i < m_nodes.size(); ++i) {
    if (!asked[i]) {
      m_requests.back().passed[i] = true;
      continue;
    }
    m_owed[i].push_back(m_requests.back().id);
    start(*m_nodes[i]);
  }
  return m_requests.back();
}

void RedlockStore::start_acquire(const lock::LockName& name, const lock::AcquireRequest& request)
{
  Request& started = begin(Op::acquire, name, node_timeout(request.ttl) + request.ack.timeout,
                           false, [&](lock::Store& node) { node.start_acquire(name, request); });
  started.acquire = request;
}

void RedlockStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                                       Millis block)
{
  // One node is waited on, the first that named the holder: a release pushes a wake-up on
  // every node, but a waiter blocked on several would take one on each and use one, leaving
  // the other waiters of those nodes asleep until their block ends.
  std::vector<bool> asked(m_nodes.size(), false);
  asked[std::min(m_wait_node, m_nodes.size() - 1)] = true;
  begin_on(asked, Op::wait_for_wake, name, block + node_timeout(lock::default_ttl), false,
           [&](lock::Store& node) { node.start_wait_for_wake(name, ticket, block); });
}

void RedlockStore::start_renew(const lock::LockName& name, const lock::RenewRequest& request)
{
  auto held = m_held.find(name.str());
  Millis ttl = request.ttl.value_or(held != m_held.end() ? held->second.ttl : lock::default_ttl);
  Request& started = begin(Op::renew, name, node_timeout(ttl) + request.ack.timeout, false,
                           [&](lock::Store& node) { node.start_renew(name, request); });
  started.token = request.token;
  if (held != m_held.end() && request.remember_ttl && request.ttl) {
    held->second.ttl = *request.ttl;
  }
}

void RedlockStore::start_release(const lock::LockName& name, const std::string& token)
{
  Request& started = begin(Op::release, name, node_timeout(lock::default_ttl), false,
                           [&](lock::Store& node) { node.start_release(name, token); });
  started.token = token;
  m_held.erase(name.str());
}

void RedlockStore::start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket)
{
  begin(Op::withdraw, name, node_timeout(lock::default_ttl), false,
        [&](lock::Store& node) { node.start_withdraw(name, ticket); });
}

void RedlockStore::undo_acquire(const Request& request)
{
  begin(Op::release, *request.name, node_timeout(request.acquire.ttl), true,
        [&](Node& node) { node.start_give_back(*request.name, request.acquire.token); });
}

void RedlockStore::rejoin(const lock::LockName& name, const std::vector<std::size_t>& nodes)
{
  auto held = m_held.find(name.str());
  if (held == m_held.end() || nodes.empty()) {
    return;
  }
  lock::AcquireRequest request = held->second;
  request.ticket = lock::WaitTicket{}; // once: a node that another holder took is left alone
  request.policy.replace = false;      // (nor asked to stand down)
  // Only the nodes that lost the lock are asked.
  std::vector<bool> asked(m_nodes.size(), false);
  for (std::size_t i : nodes) {
    asked[i] = true;
  }
  begin_on(asked, Op::acquire, name, node_timeout(request.ttl), true,
           [&](lock::Store& node) { node.start_acquire(name, request); });
}

void RedlockStore::watch(util::EventLoop& loop)
{
  for (auto& node : m_nodes) {
    node->watch(loop);
  }
  for (const Request& request : m_requests) {
    if (!request.decided || request.internal) {
      loop.wake_at(request.node_deadline);
    }
  }
}

bool RedlockStore::Request::all_in() const
{
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (!answers[i] && !passed[i]) {
      return false;
    }
  }
  return true;
}

void RedlockStore::take_answers(std::size_t node)
{
  while (std::optional<Outcome> outcome = m_nodes[node]->next_outcome()) {
    if (outcome->op == Op::disconnected) {
      m_disconnected = true;
      continue;
    }
    if (m_owed[node].empty()) {
      continue; // an answer to a request given up already
    }
    std::uint64_t id = m_owed[node].front();
    m_owed[node].pop_front();
    for (Request& request : m_requests) {
      // Not after it was timed out or passed over.
      if (request.id == id && !request.answers[node] && !request.passed[node]) {
        request.answers[node] = std::move(*outcome);
      }
    }
  }
}

void RedlockStore::drop_node(std::size_t node, const std::optional<Error>& error)
{
  take_answers(node); // what it delivered already counts; what it still owes is lost
  m_nodes[node]->abandon();
  for (std::uint64_t id : m_owed[node]) {
    for (Request& request : m_requests) {
      if (request.id != id || request.answers[node] || request.passed[node]) {
        continue;
      }
      if (error) {
        request.answers[node] = Outcome::of(request.op, *error);
      } else {
        request.passed[node] = true;
      }
    }
  }
  m_owed[node].clear();
}

void RedlockStore::collect()
{
  for (std::size_t i = 0; i < m_nodes.size(); ++i) {
    take_answers(i);
  }
  // A node that missed a request's deadline has failed it. Its connection is kept: what is
  // sent to it later queues behind, so that a node that was only slow or frozen runs the
  // requests in order when it wakes up (an acquisition, then its release), and nothing is left.
  TimePoint t = now();
  for (Request& request : m_requests) {
    if (t < request.node_deadline) {
      continue;
    }
    for (std::size_t i = 0; i < m_nodes.size(); ++i) {
      if (!request.answers[i] && !request.passed[i]) {
        request.answers[i] = Outcome::of(
          request.op, Error(ExitCode::unavailable, "{}: no answer within {}", m_names[i],
                            util::format_duration(std::chrono::duration_cast<Millis>(
                              request.node_deadline - request.sent_at))));
      }
    }
  }
  // By index, over the requests there were: a decision may start requests of its own (the
  // release of a lock not held, raise_fence, a re-join), and a push_back invalidates every
  // iterator of a deque (a range-for crashed when its map grew under contention).
  for (std::size_t k = 0, started = m_requests.size(); k < started; ++k) {
    Request& request = m_requests[k];
    if (request.decided) {
      continue;
    }
    if (std::optional<Outcome> outcome = decide(request, request.all_in())) {
      request.decided = true;
      if (!request.internal) {
        m_answers.answer(std::move(*outcome));
      }
    }
  }
  // A wait that is over (answered, or past its deadline) drops the BLPOP a node still owes,
  // since it would hold up whatever is sent to that node next.
  for (Request& request : m_requests) {
    if (request.op != Op::wait_for_wake || !request.decided) {
      continue;
    }
    for (std::size_t i = 0; i < m_nodes.size(); ++i) {
      if (std::find(m_owed[i].begin(), m_owed[i].end(), request.id) != m_owed[i].end()) {
        drop_node(i, std::nullopt); // woken elsewhere
      }
    }
  }
  while (!m_requests.empty() && m_requests.front().decided && m_requests.front().all_in()) {
    m_requests.pop_front();
  }
}

std::optional<Outcome> RedlockStore::decide(Request& request, bool all_in)
{
  switch (request.op) {
  case Op::acquire:
    return decide_acquire(request, all_in);
  case Op::renew:
    return decide_renew(request, all_in);
  case Op::release:
    return decide_release(request, all_in);
  case Op::wait_for_wake:
  case Op::withdraw:
  case Op::raise_fence: {
    // The first answer that is no error ends a wait; a withdrawal waits for all.
    bool answered = std::any_of(request.answers.begin(), request.answers.end(),
                                [](const auto& a) { return a && !a->error; });
    if (request.op == Op::wait_for_wake ? !answered && !all_in : !all_in) {
      return std::nullopt;
    }
    Outcome outcome{.op = request.op};
    if (!answered) {
      outcome.error =
        Error(ExitCode::unavailable, "no node answered ({})", tally(request, "answered"));
    }
    return outcome;
  }
  case Op::disconnected:
  case Op::gate: // never started: Redlock has no coordination
  case Op::set_latch:
  case Op::count_down:
  case Op::record: // never started: Redlock keeps no history
    break;
  }
  return Outcome::of(request.op);
}

std::optional<Outcome> RedlockStore::decide_acquire(Request& request, bool all_in)
{
  std::size_t granted = 0;
  std::size_t refused = 0;
  std::size_t failed = 0;
  for (const auto& answer : request.answers) {
    if (!answer) {
      continue;
    }
    if (answer->error) {
      ++failed;
    } else if (answer->acquire.acquired) {
      ++granted;
    } else {
      ++refused;
    }
  }
  std::size_t n = m_nodes.size();
  if (request.internal) { // a re-join: nothing to decide but that it is over
    return all_in ? std::optional<Outcome>(Outcome{}) : std::nullopt;
  }
  if (granted >= quorum()) {
    Millis elapsed = std::chrono::duration_cast<Millis>(now() - request.sent_at);
    Millis validity = request.acquire.ttl - elapsed - traits().clock_drift(request.acquire.ttl);
    if (validity <= Millis(0)) {
      undo_acquire(request);
      return Outcome::of(
        Op::acquire, Error(ExitCode::unavailable,
                           "a majority granted the lock, but only after {} of its {} TTL ({}); "
                           "released it",
                           util::format_duration(elapsed),
                           util::format_duration(request.acquire.ttl), tally(request, "granted")));
    }
    Outcome outcome{.op = Op::acquire};
    outcome.acquire.acquired = true;
    outcome.acquire.validity = validity;
    std::vector<int> acknowledged;
    for (const auto& answer : request.answers) {
      if (answer && !answer->error && answer->acquire.acquired) {
        // The largest of the granting nodes' tokens: it still grows if a minority of them
        // lost their counter.
        outcome.acquire.fence = std::max(outcome.acquire.fence, answer->acquire.fence);
        acknowledged.push_back(answer->replicas_acknowledged.value_or(0));
      }
    }
    if (request.acquire.ack.replicas > 0) {
      // What a majority of the nodes reached: the quorum-th largest count.
      std::sort(acknowledged.rbegin(), acknowledged.rend());
      outcome.replicas_acknowledged = acknowledged[quorum() - 1];
    }
    m_held[request.name->str()] = request.acquire;
    // Every node learns the token, so that any later majority hands out a larger one even if
    // the nodes that made this one lose their counters (or jumped ahead after a restart).
    begin(Op::raise_fence, *request.name, node_timeout(request.acquire.ttl), true,
          [&](Node& node) { node.start_raise_fence(*request.name, outcome.acquire.fence); });
    return outcome;
  }
  if (!all_in && refused + failed + quorum() <= n) {
    return std::nullopt; // a majority may still grant it
  }
  // Not held: whatever was taken is given back, on every node (one that timed out may have
  // taken it too).
  if (granted > 0 || failed > 0) {
    undo_acquire(request);
  }
  if (refused == 0) {
    return Outcome::of(Op::acquire, Error(ExitCode::unavailable, "no majority of the {} nodes: {}",
                                          n, tally(request, "granted the lock")));
  }
  // Held elsewhere: report the holder most nodes name, with the longest lease, and wait on
  // the first node that named a holder (it registered this waiter).
  for (std::size_t i = 0; i < request.answers.size(); ++i) {
    const auto& answer = request.answers[i];
    if (answer && !answer->error && !answer->acquire.acquired) {
      m_wait_node = i;
      break;
    }
  }
  Outcome outcome{.op = Op::acquire};
  std::size_t best_votes = 0;
  for (const auto& answer : request.answers) {
    if (!answer || answer->error || answer->acquire.acquired) {
      continue;
    }
    std::size_t votes = 0;
    for (const auto& other : request.answers) {
      votes += other && !other->error && !other->acquire.acquired
                   && other->acquire.holder.same_holder(answer->acquire.holder)
                 ? 1
                 : 0;
    }
    if (votes > best_votes
        || (votes == best_votes && lease_rank(answer->acquire) > lease_rank(outcome.acquire))) {
      best_votes = votes;
      outcome.acquire = answer->acquire;
    }
  }
  // --replace: the holder was asked on some node (its renewal there is refused; it stands
  // down once no majority extends its lease).
  outcome.acquire.replace_asked =
    std::any_of(request.answers.begin(), request.answers.end(), [](const auto& a) {
      return a && !a->error && !a->acquire.acquired && a->acquire.replace_asked;
    });
  if (best_votes < quorum()) {
    // Nobody has a majority (contenders split the nodes, or nodes failed): try again soon,
    // after a random pause, rather than waiting for a release that may never come.
    outcome.acquire.block = random_pause();
  }
  return outcome;
}

std::optional<Outcome> RedlockStore::decide_renew(Request& request, bool all_in)
{
  std::size_t extended = 0;
  std::size_t lost = 0;
  std::size_t failed = 0;
  std::vector<std::size_t> lost_nodes;
  std::optional<lock::HolderInfo> replaced_by; // a node's --replace request, refusing to extend
  for (std::size_t i = 0; i < request.answers.size(); ++i) {
    const auto& answer = request.answers[i];
    if (!answer) {
      continue;
    }
    if (answer->error) {
      ++failed;
    } else if (answer->held) {
      ++extended;
    } else {
      ++lost;
      if (answer->replaced_by) {
        replaced_by = replaced_by ? replaced_by : answer->replaced_by;
      } else {
        lost_nodes.push_back(i); // re-joined if a majority still has it
      }
    }
  }
  std::size_t n = m_nodes.size();
  if (extended >= quorum()) {
    Outcome outcome{.op = Op::renew, .held = true};
    std::vector<int> acknowledged;
    for (const auto& answer : request.answers) {
      if (answer && !answer->error && answer->held) {
        acknowledged.push_back(answer->replicas_acknowledged.value_or(0));
      }
    }
    if (std::any_of(request.answers.begin(), request.answers.end(),
                    [](const auto& a) { return a && a->replicas_acknowledged; })) {
      std::sort(acknowledged.rbegin(), acknowledged.rend());
      outcome.replicas_acknowledged = acknowledged[quorum() - 1];
    }
    // A node that lost the lock (restarted without it) takes it back, so that the majority
    // does not shrink with each restart.
    rejoin(*request.name, lost_nodes);
    return outcome;
  }
  if (lost + quorum() > n) {
    // A majority no longer extends it: lost, or asked to stand down (--replace) by whom.
    Outcome outcome = Outcome::of(Op::renew);
    outcome.replaced_by = std::move(replaced_by);
    return outcome;
  }
  if (!all_in && extended + (n - extended - lost - failed) >= quorum()) {
    return std::nullopt;
  }
  return Outcome::of(Op::renew, Error(ExitCode::unavailable,
                                      "the renewal reached no majority of the {} nodes: {}", n,
                                      tally(request, "extended the lease")));
}

std::optional<Outcome> RedlockStore::decide_release(Request& request, bool all_in)
{
  if (!all_in) {
    return std::nullopt; // every node is asked to release, and each answer is awaited
  }
  std::size_t released = 0;
  std::size_t not_held = 0;
  for (const auto& answer : request.answers) {
    if (answer && !answer->error) {
      (answer->held ? released : not_held) += 1;
    }
  }
  if (released >= quorum() || not_held + quorum() > m_nodes.size()) {
    Outcome outcome = Outcome::holding(Op::release, released >= quorum());
    // --min-hold: kept by a majority, until the soonest of their ends.
    std::vector<Millis> kept;
    for (const auto& answer : request.answers) {
      if (answer && !answer->error && answer->held && answer->kept_for > Millis(0)) {
        kept.push_back(answer->kept_for);
      }
    }
    if (kept.size() >= quorum()) {
      outcome.kept_for = *std::min_element(kept.begin(), kept.end());
    }
    return outcome;
  }
  return Outcome{.op = Op::release,
                 .error = Error(ExitCode::unavailable,
                                "the release reached no majority of the {} nodes: {}",
                                m_nodes.size(), tally(request, "released it")),
                 .held = released > 0};
}

std::string RedlockStore::tally(const Request& request, std::string_view verb) const
{
  std::size_t yes = 0;
  std::string errors;
  for (std::size_t i = 0; i < request.answers.size(); ++i) {
    const auto& answer = request.answers[i];
    if (!answer) {
      continue;
    }
    if (answer->error) {
      errors += fmt::format("; {}", answer->error->what());
    } else if (answer->acquire.acquired || answer->held) {
      ++yes;
    }
  }
  return fmt::format("{} of {} {}{}", yes, m_nodes.size(), verb, errors);
}

std::optional<Outcome> RedlockStore::next_outcome()
{
  collect();
  if (m_disconnected) {
    m_disconnected = false;
    return Outcome::of(Op::disconnected,
                       Error(ExitCode::unavailable, "a node dropped its connection"));
  }
  return m_answers.next();
}

void RedlockStore::abandon() noexcept
{
  for (auto& node : m_nodes) {
    node->abandon();
  }
  for (auto& owed : m_owed) {
    owed.clear();
  }
  m_requests.clear();
  m_answers.clear();
  m_disconnected = false;
}

Error RedlockStore::timed_out() noexcept
{
  std::string what = "timed out waiting for a majority of the nodes";
  for (const Request& request : m_requests) {
    if (!request.decided && !request.internal) {
      what = fmt::format("timed out waiting for a majority ({})", tally(request, "answered"));
      break;
    }
  }
  abandon();
  return Error(ExitCode::unavailable, "{}", what);
}

void RedlockStore::limit_blocking(Millis limit) noexcept
{
  for (auto& node : m_nodes) {
    node->limit_blocking(limit);
  }
}

lock::LockStatus RedlockStore::status(const lock::LockName& name, TimePoint deadline)
{
  std::vector<lock::LockStatus> views;
  std::vector<lock::NodeView> nodes;
  for (std::size_t i = 0; i < m_nodes.size(); ++i) {
    lock::NodeView view{.node = m_names[i]};
    try {
      lock::LockStatus status =
        m_nodes[i]->status(name, std::min(deadline, now() + node_timeout(lock::default_ttl) * 4));
      view.held = status.held;
      view.holder = status.holder;
      view.ttl_ms = status.ttl_ms;
      views.push_back(std::move(status));
    } catch (const Error& error) {
      view.error = error.what();
    }
    nodes.push_back(std::move(view));
  }
  if (views.size() < quorum()) {
    throw Error(ExitCode::unavailable, "only {} of {} nodes answered; no majority to tell",
                views.size(), m_nodes.size());
  }
  return combine(name.str(), views, std::move(nodes), quorum());
}

std::vector<lock::LockStatus> RedlockStore::list(std::string_view pattern, Millis timeout)
{
  std::map<std::string, std::vector<lock::LockStatus>> by_name;
  std::map<std::string, std::vector<lock::NodeView>> nodes_by_name;
  std::size_t answered = 0;
  std::vector<std::vector<lock::LockStatus>> per_node(m_nodes.size());
  std::vector<bool> ok(m_nodes.size(), false);
  for (std::size_t i = 0; i < m_nodes.size(); ++i) {
    try {
      per_node[i] = m_nodes[i]->list(pattern, timeout);
      ok[i] = true;
      ++answered;
      for (const lock::LockStatus& status : per_node[i]) {
        by_name[status.name]; // every name held anywhere
      }
    } catch (const Error&) {
    }
  }
  if (answered < quorum()) {
    throw Error(ExitCode::unavailable, "only {} of {} nodes answered; no majority to tell",
                answered, m_nodes.size());
  }
  std::vector<lock::LockStatus> result;
  for (auto& [name, unused] : by_name) {
    std::vector<lock::LockStatus> views;
    std::vector<lock::NodeView> nodes;
    for (std::size_t i = 0; i < m_nodes.size(); ++i) {
      lock::NodeView view{.node = m_names[i]};
      if (!ok[i]) {
        view.error = "no answer";
      }
      for (const lock::LockStatus& status : per_node[i]) {
        if (status.name == name) {
          view.held = true;
          view.holder = status.holder;
          view.ttl_ms = status.ttl_ms;
          views.push_back(status);
        }
      }
      nodes.push_back(std::move(view));
    }
    lock::LockStatus status = combine(name, views, std::move(nodes), quorum());
    if (status.held) {
      result.push_back(std::move(status));
    }
  }
  return result;
}

lock::LockStatus RedlockStore::combine(const std::string& name,
                                       const std::vector<lock::LockStatus>& views,
                                       std::vector<lock::NodeView> nodes, std::size_t quorum)
{
  lock::LockStatus combined;
  combined.name = name;
  combined.quorum = static_cast<std::int64_t>(quorum);
  // Held if a majority of all nodes name one holder; its lease is the shortest among them.
  for (const lock::LockStatus& view : views) {
    if (!view.held) {
      continue;
    }
    std::size_t votes = 0;
    std::int64_t ttl = view.ttl_ms;
    for (const lock::LockStatus& other : views) {
      if (other.held && other.holder.same_holder(view.holder)) {
        ++votes;
        ttl = std::min(ttl, other.ttl_ms);
      }
    }
    if (votes >= quorum) {
      combined.held = true;
      combined.holder = view.holder;
      combined.ttl_ms = ttl;
      combined.server_time_ms = view.server_time_ms;
      combined.command_ended = view.command_ended; // kept for its --min-hold
      break;
    }
  }
  // Free, but a --lock-delay on the nodes: it can be taken once a majority's delay is over,
  // i.e. after the (n - quorum + 1)-th longest (a node that did not answer counts as free).
  if (!combined.held) {
    std::vector<const lock::LockStatus*> delayed;
    for (const lock::LockStatus& view : views) {
      if (!view.held && view.delay_ms > 0) {
        delayed.push_back(&view);
      }
    }
    std::sort(delayed.begin(), delayed.end(),
              [](const auto* a, const auto* b) { return a->delay_ms > b->delay_ms; });
    std::size_t refusing = nodes.size() - quorum + 1; // this many delayed nodes refuse it
    if (delayed.size() >= refusing) {
      combined.delay_ms = delayed[refusing - 1]->delay_ms;
      combined.holder = delayed.front()->holder;
    }
  }
  for (const lock::LockStatus& view : views) {
    combined.last_fence = std::max(combined.last_fence, view.last_fence);
    combined.waiters = std::max(combined.waiters, view.waiters);
    if (combined.held && view.holder.same_holder(combined.holder)) {
      combined.holder.fence = std::max(combined.holder.fence, view.holder.fence);
    }
    if (!combined.held) {
      combined.server_time_ms = std::max(combined.server_time_ms, view.server_time_ms);
    }
  }
  combined.nodes = std::move(nodes);
  return combined;
}

} // namespace dlock::redis
