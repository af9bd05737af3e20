#include "stores/redis/redis_store.hpp"

#include "stores/redis/scripts.hpp"
#include "stores/redis/status.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

namespace dlock::redis {

using lock::Outcome;

namespace {

// The scripts' pttl (acquire.lua, watch.lua): the holder's remaining lease in ms, or -1 (no
// TTL), -2 (free, but earlier --fair waiters go first), -3 (free, but a waiting exclusive
// holder goes before new shared ones).
void set_lease(lock::AcquireResult& result, std::int64_t pttl)
{
  using Lease = lock::AcquireResult::Lease;
  result.lease = pttl >= 0    ? Lease::ends
                 : pttl == -2 ? Lease::fair_queue
                 : pttl == -3 ? Lease::writer_first
                              : Lease::no_expiry;
  result.holder_ttl = util::Millis(pttl >= 0 ? pttl : 0);
}

std::string ms_string(util::Millis duration) { return std::to_string(duration.count()); }

// A script's 1/0 answer; anything else is an internal error.
bool expect_flag(const redisReply& reply, std::string_view what)
{
  long long value = expect_integer(reply, what);
  if (value != 0 && value != 1) {
    throw Error(ExitCode::internal, "{}: unexpected reply (integer {})", what, value);
  }
  return value == 1;
}

const char* mode_name(lock::WaitMode mode)
{
  switch (mode) {
  case lock::WaitMode::wait:
    return "wait";
  case lock::WaitMode::fair:
    return "fair";
  case lock::WaitMode::once:
  case lock::WaitMode::watch: // the waiters that take nothing never run acquire.lua
  case lock::WaitMode::barrier:
  case lock::WaitMode::latch:
  case lock::WaitMode::leader:
    break;
  }
  return "once";
}

lock::AcquireResult parse_acquire(const redisReply& reply)
{
  throw_if_error(reply, "acquiring the lock");
  auto unexpected = [&] {
    return Error(ExitCode::internal, "acquiring the lock: unexpected reply ({})", describe(reply));
  };
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements < 2
      || reply.element[0]->type != REDIS_REPLY_INTEGER) {
    throw unexpected();
  }
  if (reply.element[0]->type == REDIS_REPLY_INTEGER && reply.element[0]->integer == 2) {
    // Held as another kind: {2, kind}; {2, 'foreign'} when the kind key holds what dlock did
    // not write (another tenant's): held by no dlock holder, asked again after a while (no
    // release of dlock's will wake the waiter).
    if (reply.element[1]->type != REDIS_REPLY_STRING) {
      throw unexpected();
    }
    std::string_view code(reply.element[1]->str, reply.element[1]->len);
    lock::AcquireResult result;
    if (code == "foreign") {
      result.lease = lock::AcquireResult::Lease::no_expiry;
      result.holder = lock::HolderInfo::not_dlock();
      result.block = util::Millis(1000);
      return result;
    }
    result.kind_in_use = lock::LockKind::from_code(code);
    if (!result.kind_in_use) {
      throw unexpected();
    }
    return result;
  }
  if (reply.element[1]->type != REDIS_REPLY_INTEGER) {
    throw unexpected();
  }
  lock::AcquireResult result;
  result.acquired = reply.element[0]->integer == 1;
  if (result.acquired) {
    result.fence = reply.element[1]->integer;
    return result;
  }
  if (reply.elements != 9) {
    throw unexpected();
  }
  for (std::size_t i : {3, 4, 5, 6, 7}) {
    if (reply.element[i]->type != REDIS_REPLY_INTEGER) {
      throw unexpected();
    }
  }
  set_lease(result, reply.element[1]->integer);
  result.holder = holder_from_hash(*reply.element[2]);
  result.block = util::Millis(reply.element[3]->integer);
  result.holders = reply.element[4]->integer;
  // The policies: {..., state (1: kept for --min-hold, 2: --lock-delay), replace asked,
  // superseded, by whom}.
  using Lease = lock::AcquireResult::Lease;
  std::int64_t state = reply.element[5]->integer;
  if (state == 1 || state == 2) {
    result.lease = state == 1 ? Lease::min_hold : Lease::lock_delay;
    result.holder_ttl = util::Millis(std::max<std::int64_t>(reply.element[1]->integer, 0));
  }
  result.replace_asked = reply.element[6]->integer == 1;
  if (reply.element[7]->integer == 1) {
    result.superseded_by = holder_from_hash(*reply.element[8]);
  }
  return result;
}

// Element i of a script's array reply, an integer; anything else is an internal error.
std::int64_t element_integer(const redisReply& reply, std::size_t i, std::string_view what)
{
  if (reply.type != REDIS_REPLY_ARRAY || i >= reply.elements
      || reply.element[i]->type != REDIS_REPLY_INTEGER) {
    throw Error(ExitCode::internal, "{}: unexpected reply ({})", what, describe(reply));
  }
  return reply.element[i]->integer;
}

// watch.lua's answer: {1}, or {0, pttl, holder-hash, block_ms, slot holders, since}.
lock::GateResult parse_watch(const redisReply& reply)
{
  constexpr std::string_view what = "waiting for the lock to be free";
  throw_if_error(reply, what);
  lock::GateResult result;
  result.open = element_integer(reply, 0, what) == 1;
  if (result.open) {
    return result;
  }
  set_lease(result.lock, element_integer(reply, 1, what));
  if (reply.elements != 6) {
    throw Error(ExitCode::internal, "{}: unexpected reply ({})", what, describe(reply));
  }
  result.lock.holder = holder_from_hash(*reply.element[2]);
  result.block = util::Millis(element_integer(reply, 3, what));
  result.lock.holders = element_integer(reply, 4, what);
  result.since = element_integer(reply, 5, what);
  return result;
}

// leader.lua's answer: {open, term, pttl, holder-hash, block_ms, slot holders}.
lock::GateResult parse_leader(const redisReply& reply)
{
  constexpr std::string_view what = "watching the leader";
  throw_if_error(reply, what);
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 6) {
    throw Error(ExitCode::internal, "{}: unexpected reply ({})", what, describe(reply));
  }
  lock::GateResult result;
  result.open = element_integer(reply, 0, what) == 1;
  result.since = element_integer(reply, 1, what);
  std::int64_t pttl = element_integer(reply, 2, what);
  result.block = util::Millis(element_integer(reply, 4, what));
  result.lock.holders = element_integer(reply, 5, what);
  if (result.since != 0) { // held: who by, and for how long
    set_lease(result.lock, pttl);
    result.lock.holder = holder_from_hash(*reply.element[3]);
  }
  return result;
}

// barrier.lua's answer: {1, generation, parties, to wake}, {2, generation, parties in
// progress}, or {0, generation, parties, arrived, block_ms}.
lock::GateResult parse_barrier(const redisReply& reply, std::int64_t& to_wake)
{
  constexpr std::string_view what = "arriving at the barrier";
  throw_if_error(reply, what);
  lock::GateResult result;
  std::int64_t status = element_integer(reply, 0, what);
  result.generation = element_integer(reply, 1, what);
  result.parties = element_integer(reply, 2, what);
  if (status == 1) {
    result.open = true;
    to_wake = element_integer(reply, 3, what);
  } else if (status == 0) {
    result.arrived = element_integer(reply, 3, what);
    result.block = util::Millis(element_integer(reply, 4, what));
  } else if (status != 2) {
    throw Error(ExitCode::internal, "{}: unexpected reply ({})", what, describe(reply));
  }
  return result;
}

// latch_check.lua's answer: {1, 0} or {0, count, block_ms}.
lock::GateResult parse_latch(const redisReply& reply)
{
  constexpr std::string_view what = "waiting for the latch";
  throw_if_error(reply, what);
  lock::GateResult result;
  result.open = element_integer(reply, 0, what) == 1;
  result.count = element_integer(reply, 1, what);
  if (!result.open) {
    result.block = util::Millis(element_integer(reply, 2, what));
  }
  return result;
}

// How long a barrier's state is kept after its last arrival: its generation outlives every
// party that may still ask whether it tripped.
constexpr util::Millis barrier_keep = std::chrono::hours(24);

} // namespace

RedisStore::RedisStore(ConnectOptions options, std::string prefix,
                       std::unique_ptr<SwitchListener> switches)
  : m_switches(std::move(switches)), m_prefix(std::move(prefix))
{
  m_nodes.push_back(std::make_unique<Node>(std::move(options)));
}

namespace {

// How many times one request may be sent elsewhere (MOVED, ASK) before dlock gives up: a slot
// in migration needs two or three; more means the cluster is reconfiguring.
constexpr int max_redirects = 8;

// The pause before a request that met TRYAGAIN for the n-th time is sent again: 50 ms,
// doubling up to 400 ms. A multi-key script meets TRYAGAIN for as long as its slot is being
// migrated (some of its keys are on neither side yet), so it is retried until the caller's
// deadline rather than a number of times.
util::Millis try_again_pause(int n) { return util::Millis(50) * (1 << std::min(n, 3)); }

} // namespace

RedisStore::Node& RedisStore::node_at(const std::string& host, int port)
{
  for (auto& node : m_nodes) {
    const Endpoint& endpoint = node->connection.endpoint();
    if (endpoint.transport == Endpoint::Transport::tcp && endpoint.host == host
        && endpoint.port == port) {
      return *node;
    }
  }
  // Another node of the same cluster: the same credentials, TLS settings and timeouts.
  ConnectOptions options = m_nodes.front()->connection.options();
  options.locate = nullptr;
  options.require_master = false;
  options.role_label.clear();
  options.endpoint.transport = Endpoint::Transport::tcp;
  options.endpoint.host = host;
  options.endpoint.port = port;
  m_nodes.push_back(std::make_unique<Node>(std::move(options)));
  m_nodes.back()->connection.limit_blocking(m_blocking_limit);
  return *m_nodes.back();
}

RedisStore::Node& RedisStore::node_for_slot(int slot)
{
  auto found = m_slot_nodes.find(slot);
  return found != m_slot_nodes.end() ? *found->second : *m_nodes.front();
}

void RedisStore::send(Pending pending, Node* node)
{
  if (m_redlock_node && !pending.eval.empty()) {
    // The script's body goes first time: a node that answers late may run it after dlock
    // decided without it, or is gone, when nobody is left to answer NOSCRIPT.
    pending.argv = std::move(pending.eval);
    pending.eval.clear();
  }
  Node& target = node != nullptr ? *node : node_for_slot(pending.slot);
  try {
    target.connection.send(pending.argv);
    target.pending.push_back(std::move(pending));
  } catch (const Error& error) {
    fail(pending, error);
  }
}

void RedisStore::fail(const Pending& pending, const Error& error)
{
  if (pending.last) {
    m_answers.answer(pending.op, error);
  }
}

void RedisStore::start_acquire(const lock::LockName& name, const lock::AcquireRequest& request)
{
  LockKeys k = keys(name);
  const lock::HolderInfo& me = request.holder;
  const lock::WaitTicket& ticket = request.ticket;
  std::vector<std::string> script_keys{
    k.lock,         k.fence,    k.holder, k.waiters, k.queue,
    k.queue_expiry, k.holders,  k.slots,  k.kind,    k.writers,
    k.wake,         k.watchers, k.freed,  k.newest,  k.leader_watchers,
    k.leader_wake};
  std::vector<std::string> args{request.token,
                                ms_string(request.ttl),
                                me.host,
                                std::to_string(me.pid),
                                me.user,
                                me.command,
                                ticket.waiter_id,
                                mode_name(ticket.mode),
                                ms_string(ticket.max_block),
                                request.kind.code(),
                                me.note,
                                ms_string(request.policy.min_hold),
                                ms_string(request.policy.lock_delay),
                                request.policy.replace ? "1" : "0",
                                request.policy.supersede ? "1" : "0",
                                ticket.registered ? "1" : "0",
                                me.value};
  const Script& script = scripts::acquire();
  send(Pending{.op = Outcome::Op::acquire,
               .argv = script.evalsha(script_keys, args),
               .eval = script.eval(script_keys, args),
               .slot = key_slot(k.lock),
               .ack = request.ack});
}

void RedisStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                                     util::Millis block)
{
  LockKeys k = keys(name);
  std::string list;
  switch (ticket.mode) {
  case lock::WaitMode::fair:
    list = k.wake_for(ticket.waiter_id);
    break;
  case lock::WaitMode::watch:
    list = k.watch;
    break;
  case lock::WaitMode::barrier:
    list = k.barrier_wake(ticket.generation);
    break;
  case lock::WaitMode::latch:
    list = k.latch_wake;
    break;
  case lock::WaitMode::leader:
    list = k.leader_wake;
    break;
  case lock::WaitMode::once:
  case lock::WaitMode::wait:
    list = k.wake;
    break;
  }
  send(Pending{
    .op = Outcome::Op::wait_for_wake,
    .argv = {"BLPOP", list, fmt::format("{:.3f}", static_cast<double>(block.count()) / 1000)},
    .slot = key_slot(k.lock)});
}

void RedisStore::start_renew(const lock::LockName& name, const lock::RenewRequest& request)
{
  LockKeys k = keys(name);
  std::vector<std::string> script_keys = request.slot
                                           ? std::vector<std::string>{k.holders, k.slots, k.kind}
                                           : std::vector<std::string>{k.lock, k.holder};
  std::vector<std::string> args{request.token,
                                request.ttl ? ms_string(*request.ttl) : std::string(),
                                request.ttl && request.remember_ttl ? "1" : "0"};
  const Script& script = request.slot ? scripts::renew_slot() : scripts::renew();
  send(Pending{.op = Outcome::Op::renew,
               .argv = script.evalsha(script_keys, args),
               .eval = script.eval(script_keys, args),
               .slot = key_slot(k.lock),
               .ack = request.ack,
               .slot_renewal = request.slot});
}

void RedisStore::start_release(const lock::LockName& name, const std::string& token)
{
  send_release(name, token, false);
}

void RedisStore::start_give_back(const lock::LockName& name, const std::string& token)
{
  send_release(name, token, true);
}

void RedisStore::send_release(const lock::LockName& name, const std::string& token, bool at_once)
{
  LockKeys k = keys(name);
  std::vector<std::string> script_keys{
    k.lock,  k.holder, k.waiters,  k.queue, k.queue_expiry,    k.wake,       k.holders,
    k.slots, k.kind,   k.watchers, k.watch, k.leader_watchers, k.leader_wake};
  const Script& script = scripts::release();
  std::vector<std::string> args{token, at_once ? "1" : "0"};
  send(Pending{.op = Outcome::Op::release,
               .argv = script.evalsha(script_keys, args),
               .eval = script.eval(script_keys, args),
               .slot = key_slot(k.lock),
               .wake_prefix = k.fair_wake_prefix});
}

void RedisStore::start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket)
{
  LockKeys k = keys(name);
  int slot = key_slot(k.lock);
  switch (ticket.mode) {
  case lock::WaitMode::watch:
    send(Pending{
      .op = Outcome::Op::withdraw, .argv = {"ZREM", k.watchers, ticket.waiter_id}, .slot = slot});
    return;
  case lock::WaitMode::latch:
    send(Pending{.op = Outcome::Op::withdraw,
                 .argv = {"ZREM", k.latch_waiters, ticket.waiter_id},
                 .slot = slot});
    return;
  case lock::WaitMode::barrier: {
    // Atomically with a last arrival: a party whose barrier tripped first has passed it.
    std::vector<std::string> script_keys{k.barrier, k.arrivals};
    std::vector<std::string> args{ticket.waiter_id, std::to_string(ticket.generation)};
    const Script& script = scripts::barrier_leave();
    send(Pending{.op = Outcome::Op::withdraw,
                 .argv = script.evalsha(script_keys, args),
                 .eval = script.eval(script_keys, args),
                 .slot = slot,
                 .gate_mode = ticket.mode});
    return;
  }
  case lock::WaitMode::leader:
    send(Pending{.op = Outcome::Op::withdraw,
                 .argv = {"ZREM", k.leader_watchers, ticket.waiter_id},
                 .slot = slot});
    return;
  case lock::WaitMode::once:
  case lock::WaitMode::wait:
  case lock::WaitMode::fair:
    break;
  }
  if (ticket.mode == lock::WaitMode::fair) {
    send(Pending{.op = Outcome::Op::withdraw,
                 .argv = {"ZREM", k.queue, ticket.waiter_id},
                 .slot = slot,
                 .last = false});
    send(Pending{.op = Outcome::Op::withdraw,
                 .argv = {"ZREM", k.queue_expiry, ticket.waiter_id},
                 .slot = slot});
  } else if (ticket.mode == lock::WaitMode::wait) {
    send(Pending{.op = Outcome::Op::withdraw,
                 .argv = {"ZREM", k.waiters, ticket.waiter_id},
                 .slot = slot,
                 .last = false});
  }
  if (ticket.mode != lock::WaitMode::once) {
    // An exclusive waiter also kept new shared holders out.
    send(Pending{
      .op = Outcome::Op::withdraw, .argv = {"ZREM", k.writers, ticket.waiter_id}, .slot = slot});
  } else {
    m_answers.answer(Outcome::Op::withdraw);
  }
}

void RedisStore::start_raise_fence(const lock::LockName& name, std::int64_t at_least)
{
  LockKeys k = keys(name);
  std::vector<std::string> script_keys{k.fence};
  // As long as acquire keeps the counter.
  std::vector<std::string> args{std::to_string(at_least), std::to_string(7LL * 86'400'000)};
  const Script& script = scripts::raise_fence();
  send(Pending{.op = Outcome::Op::raise_fence,
               .argv = script.evalsha(script_keys, args),
               .eval = script.eval(script_keys, args),
               .slot = key_slot(k.lock)});
}

void RedisStore::start_gate(const lock::LockName& name, const lock::GateRequest& request)
{
  LockKeys k = keys(name);
  const lock::WaitTicket& ticket = request.ticket;
  const Script* script = nullptr;
  std::vector<std::string> script_keys;
  std::vector<std::string> args;
  switch (ticket.mode) {
  case lock::WaitMode::watch:
    script = &scripts::watch();
    script_keys = {k.lock, k.holder, k.holders, k.slots, k.watchers, k.freed};
    args = {ticket.waiter_id, std::to_string(ticket.since), ms_string(ticket.max_block)};
    break;
  case lock::WaitMode::barrier:
    script = &scripts::barrier();
    script_keys = {k.barrier, k.arrivals};
    args = {ticket.waiter_id, std::to_string(request.parties), std::to_string(ticket.generation),
            ms_string(ticket.max_block), ms_string(barrier_keep)};
    break;
  case lock::WaitMode::latch:
    script = &scripts::latch_check();
    script_keys = {k.latch, k.latch_waiters};
    args = {ticket.waiter_id, ms_string(ticket.max_block)};
    break;
  case lock::WaitMode::leader:
    script = &scripts::leader();
    script_keys = {k.lock, k.holder, k.holders, k.slots, k.leader_watchers};
    args = {ticket.waiter_id, std::to_string(ticket.since), ms_string(ticket.max_block)};
    break;
  case lock::WaitMode::once:
  case lock::WaitMode::wait:
  case lock::WaitMode::fair:
    m_answers.answer(Outcome::Op::gate, Error(ExitCode::internal, "a lock waiter at a gate"));
    return;
  }
  send(Pending{.op = Outcome::Op::gate,
               .argv = script->evalsha(script_keys, args),
               .eval = script->eval(script_keys, args),
               .slot = key_slot(k.lock),
               .wake_prefix = k.barrier_wake_prefix,
               .gate_mode = ticket.mode});
}

void RedisStore::start_set_latch(const lock::LockName& name, std::int64_t count,
                                 util::Millis expire)
{
  LockKeys k = keys(name);
  std::vector<std::string> script_keys{k.latch, k.latch_waiters, k.latch_wake};
  std::vector<std::string> args{std::to_string(count), ms_string(expire)};
  const Script& script = scripts::latch_set();
  send(Pending{.op = Outcome::Op::set_latch,
               .argv = script.evalsha(script_keys, args),
               .eval = script.eval(script_keys, args),
               .slot = key_slot(k.lock)});
}

void RedisStore::start_count_down(const lock::LockName& name)
{
  LockKeys k = keys(name);
  std::vector<std::string> script_keys{k.latch, k.latch_waiters, k.latch_wake};
  const Script& script = scripts::latch_down();
  send(Pending{.op = Outcome::Op::count_down,
               .argv = script.evalsha(script_keys, {}),
               .eval = script.eval(script_keys, {}),
               .slot = key_slot(k.lock)});
}

void RedisStore::watch(util::EventLoop& loop)
{
  if (m_switches) {
    m_switches->watch(loop, [this](const std::string& address) {
      Node& master = *m_nodes.front();
      if (master.connection.fd() >= 0) {
        leave_node(master,
                   Error(ExitCode::unavailable, "{}: the Sentinels switched to a new master at {}",
                         master.connection.describe_endpoint(), address));
      }
    });
  }
  // Requests whose TRYAGAIN pause is over go out again.
  util::TimePoint now = util::monotonic_now();
  std::vector<Retry> due;
  std::erase_if(m_retries, [&](Retry& retry) {
    if (retry.at > now) {
      loop.wake_at(retry.at);
      return false;
    }
    due.push_back(std::move(retry));
    return true;
  });
  for (Retry& retry : due) {
    send(std::move(retry.pending));
  }
  for (auto& node : m_nodes) {
    Node* watched = node.get();
    int fd = watched->connection.fd();
    loop.watch(fd, watched->connection.poll_events(), [this, watched, fd](short revents) {
      if (watched->connection.fd() == fd) { // not dropped by an earlier handler of the same round
        on_io(*watched, revents);
      }
    });
  }
}

void RedisStore::on_io(Node& node, short revents)
{
  try {
    node.connection.process_io(revents);
    while (std::optional<Reply> reply = node.connection.next_reply()) {
      on_reply(node, **reply);
    }
  } catch (const Error& error) {
    node.connection.reset();
    fail_all(node, error);
  }
}

bool RedisStore::follow(Pending& pending, const Redirect& redirect)
{
  if (++pending.redirects > max_redirects) {
    return false;
  }
  Node& target = node_at(redirect.host, redirect.port);
  if (!redirect.ask) {
    m_slot_nodes[redirect.slot] = &target; // the slot has moved for good
    send(std::move(pending), &target);
    return true;
  }
  // The slot is being migrated, and the keys are there already: this command only.
  send(Pending{.op = pending.op, .argv = {"ASKING"}, .last = false}, &target);
  send(std::move(pending), &target);
  return true;
}

void RedisStore::on_reply(Node& node, const redisReply& reply)
{
  Pending pending = std::move(node.pending.front());
  node.pending.pop_front();
  if (!pending.eval.empty() && is_noscript(reply)) {
    // The script cache was flushed (restart, failover, SCRIPT FLUSH): send the body.
    pending.argv = std::move(pending.eval);
    pending.eval.clear();
    send(std::move(pending), &node);
    return;
  }
  if (auto redirect = parse_redirect(reply)) {
    if (m_redlock_node) {
      fail(pending, Error(ExitCode::usage,
                          "{} is a Redis Cluster node: with several --url (Redlock), each must be "
                          "an independent master",
                          node.connection.describe_endpoint()));
      return;
    }
    if (!follow(pending, *redirect)) {
      fail(pending,
           Error(ExitCode::unavailable, "the cluster redirected a request {} times (last to {})",
                 max_redirects, redirect->address()));
    }
    return;
  }
  if (is_try_again(reply)) {
    util::TimePoint at = util::monotonic_now() + try_again_pause(pending.try_agains++);
    m_retries.push_back(Retry{at, std::move(pending)});
    return;
  }
  if (pending.held_back) {
    // The follow-up step of an operation: its outcome was made already.
    Outcome outcome = std::move(*pending.held_back);
    if (pending.counts_replicas) {
      try {
        outcome.replicas_acknowledged =
          static_cast<int>(expect_integer(reply, "waiting for replicas"));
      } catch (const Error& error) {
        outcome.error = error;
      }
    } // a failed wake-up leaves the release (the trip) done: the waiters wake at their next
      // retry
    finish(node, pending, std::move(outcome), std::nullopt);
    return;
  }
  if (!pending.last) {
    return;
  }
  std::optional<WakeUp> wake;
  Outcome outcome = make_outcome(pending, reply, wake);
  if (outcome.error && is_not_master(reply)) {
    m_answers.answer(std::move(outcome));
    leave_node(node, Error(ExitCode::unavailable, "{}: the node is no longer the master",
                           node.connection.describe_endpoint()));
    return;
  }
  finish(node, pending, std::move(outcome), wake);
}

lock::Outcome RedisStore::make_outcome(const Pending& pending, const redisReply& reply,
                                       std::optional<WakeUp>& wake) const
{
  Outcome outcome{.op = pending.op};
  try {
    switch (pending.op) {
    case Outcome::Op::acquire:
      outcome.acquire = parse_acquire(reply);
      break;
    case Outcome::Op::wait_for_wake:
      throw_if_error(reply, "waiting for the lock");
      break;
    case Outcome::Op::renew:
      if (reply.type == REDIS_REPLY_ARRAY) { // {2, record}: a --replace acquirer asked
        if (reply.elements != 2 || element_integer(reply, 0, "renewing the lease") != 2) {
          throw Error(ExitCode::internal, "renewing the lease: unexpected reply ({})",
                      describe(reply));
        }
        outcome.replaced_by = holder_from_hash(*reply.element[1]);
        break;
      }
      outcome.held = expect_flag(reply, "renewing the lease");
      outcome.slot = outcome.held && pending.slot_renewal;
      break;
    case Outcome::Op::release:
      if (reply.type == REDIS_REPLY_STRING) { // released; this --fair waiter goes next
        wake = WakeUp{fair_wake_list(pending.wake_prefix, std::string_view(reply.str, reply.len))};
        outcome.held = true;
      } else if (reply.type == REDIS_REPLY_ARRAY) { // {ms left}: kept for its --min-hold
        outcome.held = true;
        outcome.kept_for =
          util::Millis(std::max<std::int64_t>(element_integer(reply, 0, "releasing the lock"), 0));
      } else {
        outcome.held = expect_flag(reply, "releasing the lock");
      }
      break;
    case Outcome::Op::withdraw:
      if (pending.gate_mode == lock::WaitMode::barrier) {
        outcome.gate.open = expect_flag(reply, "withdrawing from the barrier");
      } else {
        throw_if_error(reply, "withdrawing from the wait");
      }
      break;
    case Outcome::Op::gate:
      if (pending.gate_mode == lock::WaitMode::watch) {
        outcome.gate = parse_watch(reply);
      } else if (pending.gate_mode == lock::WaitMode::leader) {
        outcome.gate = parse_leader(reply);
      } else if (pending.gate_mode == lock::WaitMode::barrier) {
        std::int64_t to_wake = 0;
        outcome.gate = parse_barrier(reply, to_wake);
        if (to_wake > 0) { // the last party: wake the others on the generation's own list
          wake = WakeUp{barrier_wake_list(pending.wake_prefix, outcome.gate.generation), to_wake};
        }
      } else {
        outcome.gate = parse_latch(reply);
      }
      break;
    case Outcome::Op::set_latch:
      throw_if_error(reply, "setting the latch");
      break;
    case Outcome::Op::count_down:
      outcome.gate.count = expect_integer(reply, "counting the latch down");
      break;
    case Outcome::Op::raise_fence:
      throw_if_error(reply, "raising the fencing counter");
      break;
    case Outcome::Op::record:
      throw_if_error(reply, "adding to the lock's history");
      break;
    case Outcome::Op::disconnected: // never sent: it is no request
      break;
    }
  } catch (const Error& error) {
    outcome.error = error;
  }
  return outcome;
}

void RedisStore::finish(Node& node, Pending& pending, Outcome outcome,
                        const std::optional<WakeUp>& wake)
{
  if (wake) {
    // The release let a --fair waiter in, or the barrier tripped: wake them on their own list,
    // then report the outcome.
    std::vector<std::string> wake_keys{wake->list};
    std::vector<std::string> wake_args{std::to_string(wake->count)};
    send(Pending{.op = pending.op,
                 .argv = scripts::wake().evalsha(wake_keys, wake_args),
                 .eval = scripts::wake().eval(wake_keys, wake_args),
                 .slot = pending.slot,
                 .held_back = std::move(outcome)},
         &node);
    return;
  }
  bool written = !outcome.error && (outcome.acquire.acquired || outcome.held);
  if (pending.ack.replicas > 0 && written && !pending.counts_replicas) {
    // WAIT counts the replicas that have every write of this connection so far.
    send(Pending{.op = pending.op,
                 .argv = {"WAIT", std::to_string(pending.ack.replicas),
                          ms_string(pending.ack.timeout)},
                 .held_back = std::move(outcome),
                 .counts_replicas = true},
         &node);
    return;
  }
  m_answers.answer(std::move(outcome));
}

void RedisStore::fail_all(Node& node, const Error& error)
{
  bool owed = false;
  for (const Pending& pending : node.pending) {
    if (pending.last) {
      m_answers.answer(pending.op, error);
      // A history event is waited for by no one who watches the connection (a lease keeper).
      owed = owed || pending.op != Outcome::Op::record;
    }
  }
  node.pending.clear();
  if (!owed) {
    m_answers.answer(Outcome::Op::disconnected, error);
  }
}

void RedisStore::leave_node(Node& node, const Error& error)
{
  node.connection.reset();
  fail_all(node, error);
}

std::optional<Outcome> RedisStore::next_outcome() { return m_answers.next(); }

void RedisStore::abandon() noexcept
{
  for (auto& node : m_nodes) {
    node->connection.reset();
    node->pending.clear();
  }
  if (m_switches) {
    m_switches->reset();
  }
  m_answers.clear();
  m_retries.clear();
}

Error RedisStore::timed_out() noexcept
{
  // The node that owes a reply, else the first.
  Node* late = m_nodes.front().get();
  for (auto& node : m_nodes) {
    if (!node->pending.empty()) {
      late = node.get();
      break;
    }
  }
  bool connecting = late->connection.connecting();
  std::string endpoint = late->connection.describe_endpoint();
  abandon();
  return Error(ExitCode::unavailable, "{}: {}", endpoint,
               connecting ? "timed out connecting" : "timed out waiting for a reply");
}

const lock::StoreTraits& RedisStore::traits() const noexcept
{
  static const lock::StoreTraits traits{
    .name = "Redis",
    .features = lock::features_of(lock::StoreKind::redis),
  };
  return traits;
}

void RedisStore::limit_blocking(util::Millis limit) noexcept
{
  m_blocking_limit = limit;
  for (auto& node : m_nodes) {
    node->connection.limit_blocking(limit);
  }
}

void RedisStore::at_slot(int slot, util::TimePoint deadline,
                         const std::function<void(Connection&)>& read)
{
  Node* node = &node_for_slot(slot);
  bool asking = false;
  for (int hop = 0;; ++hop) {
    try {
      if (asking) {
        throw_if_error(*node->connection.call({"ASKING"}, deadline),
                       "following a cluster redirect");
      }
      read(node->connection);
      return;
    } catch (const Redirected& redirected) {
      const Redirect& redirect = redirected.redirect();
      if (m_redlock_node) {
        throw Error(ExitCode::usage,
                    "{} is a Redis Cluster node: with several --url (Redlock), each must be an "
                    "independent master",
                    node->connection.describe_endpoint());
      }
      if (hop == max_redirects) {
        throw;
      }
      node = &node_at(redirect.host, redirect.port);
      asking = redirect.ask;
      if (!asking) {
        m_slot_nodes[slot] = node;
      }
    }
  }
}

lock::LockStatus RedisStore::status(const lock::LockName& name, util::TimePoint deadline)
{
  LockKeys k = keys(name);
  lock::LockStatus status;
  at_slot(key_slot(k.lock), deadline, [&](Connection& connection) {
    status = read_status(connection, m_prefix, name.str(), deadline);
  });
  return status;
}

void RedisStore::start_record(const lock::LockName& name, const std::string& text)
{
  LockKeys k = keys(name);
  std::vector<std::string> script_keys{k.history};
  std::vector<std::string> args{text, std::to_string(lock::max_history_events),
                                ms_string(lock::history_keep)};
  const Script& script = scripts::record();
  send(Pending{.op = Outcome::Op::record,
               .argv = script.evalsha(script_keys, args),
               .eval = script.eval(script_keys, args),
               .slot = key_slot(k.lock)});
}

std::vector<std::string> RedisStore::events(const lock::LockName& name, std::size_t limit,
                                            util::TimePoint deadline)
{
  std::vector<std::string> texts;
  // The stream keeps max_history_events; one another tenant made longer is read no further.
  limit = std::min(limit, lock::max_history_events);
  if (limit == 0) {
    return texts;
  }
  LockKeys k = keys(name);
  std::vector<std::string> args{std::to_string(limit), std::to_string(lock::max_event_bytes)};
  at_slot(key_slot(k.lock), deadline, [&](Connection& connection) {
    texts.clear();
    Reply reply = scripts::history().run(connection, {k.history}, args, deadline);
    if (auto redirect = parse_redirect(*reply)) {
      throw Redirected(std::move(*redirect));
    }
    constexpr std::string_view what = "reading the lock's history";
    throw_if_error(*reply, what);
    std::int64_t found = element_integer(*reply, 0, what);
    if (found == -1) {
      std::string_view type = reply->elements == 2 && reply->element[1]->type == REDIS_REPLY_STRING
                                ? std::string_view(reply->element[1]->str, reply->element[1]->len)
                                : std::string_view("?");
      util::log_verbose("{} is a {}, not dlock's history: left alone, no events",
                        util::printable(k.history), util::printable(type.substr(0, 32)));
      return;
    }
    for (std::size_t i = 1; i < reply->elements; ++i) {
      const redisReply& text = *reply->element[i];
      if (text.type == REDIS_REPLY_STRING && text.len <= lock::max_event_bytes) {
        texts.emplace_back(text.str, text.len);
      }
    }
  });
  return texts;
}

std::vector<RedisStore::Node*> RedisStore::cluster_masters(util::Millis timeout)
{
  if (m_redlock_node) {
    return {};
  }
  Node& seed = *m_nodes.front();
  Reply reply = seed.connection.call({"CLUSTER", "SLOTS"}, util::deadline_after(timeout));
  auto ranges = parse_cluster_slots(*reply);
  std::vector<Node*> masters;
  if (!ranges) {
    return masters;
  }
  for (const SlotRange& range : *ranges) {
    // A node that does not know its own address reports it empty: it is the seed.
    Node& node = range.host.empty() ? seed : node_at(range.host, range.port);
    for (int slot = range.first; slot <= range.last; ++slot) {
      m_slot_nodes[slot] = &node;
    }
    if (std::find(masters.begin(), masters.end(), &node) == masters.end()) {
      masters.push_back(&node);
    }
  }
  return masters;
}

std::vector<lock::LockStatus> RedisStore::list(std::string_view pattern, util::Millis timeout)
{
  std::vector<Node*> masters = cluster_masters(timeout);
  if (masters.empty()) {
    masters.push_back(m_nodes.front().get()); // a single server
  }
  std::vector<lock::LockStatus> statuses;
  for (Node* node : masters) {
    std::vector<std::string> names = scan_lock_names(node->connection, m_prefix, pattern, timeout);
    for (lock::LockStatus& status : read_statuses(node->connection, m_prefix, names, timeout)) {
      statuses.push_back(std::move(status));
    }
  }
  std::sort(statuses.begin(), statuses.end(),
            [](const lock::LockStatus& a, const lock::LockStatus& b) { return a.name < b.name; });
  return statuses;
}

} // namespace dlock::redis
