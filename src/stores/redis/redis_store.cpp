#include "stores/redis/redis_store.hpp"

#include "stores/redis/scripts.hpp"
#include "stores/redis/status.hpp"

namespace dlock::redis {

using lock::Outcome;

namespace {

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
      || reply.element[0]->type != REDIS_REPLY_INTEGER
      || reply.element[1]->type != REDIS_REPLY_INTEGER) {
    throw unexpected();
  }
  lock::AcquireResult result;
  result.acquired = reply.element[0]->integer == 1;
  if (result.acquired) {
    result.fence = reply.element[1]->integer;
    return result;
  }
  if (reply.elements != 4 || reply.element[3]->type != REDIS_REPLY_INTEGER) {
    throw unexpected();
  }
  result.holder_ttl_ms = reply.element[1]->integer;
  result.holder = holder_from_hash(*reply.element[2]);
  result.block = util::Millis(reply.element[3]->integer);
  return result;
}

} // namespace

RedisStore::RedisStore(ConnectOptions options, std::string prefix)
  : m_connection(std::move(options)), m_prefix(std::move(prefix))
{
}

void RedisStore::send(Outcome::Op op, std::vector<std::string> argv, std::vector<std::string> eval,
                      bool last)
{
  send(Pending{op, std::move(eval), last}, argv);
}

void RedisStore::send(Pending pending, const std::vector<std::string>& argv)
{
  try {
    m_connection.send(argv);
    m_pending.push_back(std::move(pending));
  } catch (const Error& error) {
    if (pending.last) {
      m_ready.push_back(Outcome{pending.op, error, false, {}, {}});
    }
  }
}

void RedisStore::start_acquire(const lock::LockName& name, const lock::AcquireRequest& request)
{
  LockKeys k = keys(name);
  const lock::HolderInfo& me = request.holder;
  const lock::WaitTicket& ticket = request.ticket;
  std::vector<std::string> script_keys{k.lock, k.fence, k.holder, k.waiters, k.queue, k.queue_expiry};
  std::vector<std::string> args{request.token, ms_string(request.ttl), me.host,
                                std::to_string(me.pid), me.user, me.command, ticket.waiter_id,
                                mode_name(ticket.mode), ms_string(ticket.max_block)};
  const Script& script = scripts::acquire();
  send(Pending{Outcome::Op::acquire, script.eval(script_keys, args), true, request.ack},
       script.evalsha(script_keys, args));
}

void RedisStore::start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                                     util::Millis block)
{
  LockKeys k = keys(name);
  const std::string& list = ticket.mode == lock::WaitMode::fair ? k.wake_for(ticket.waiter_id) : k.wake;
  send(Outcome::Op::wait_for_wake,
       {"BLPOP", list, fmt::format("{:.3f}", static_cast<double>(block.count()) / 1000)});
}

void RedisStore::start_renew(const lock::LockName& name, const lock::RenewRequest& request)
{
  LockKeys k = keys(name);
  std::vector<std::string> script_keys{k.lock, k.holder};
  std::vector<std::string> args{request.token, request.ttl ? ms_string(*request.ttl) : std::string(),
                                request.ttl && request.remember_ttl ? "1" : "0"};
  const Script& script = scripts::renew();
  send(Pending{Outcome::Op::renew, script.eval(script_keys, args), true, request.ack},
       script.evalsha(script_keys, args));
}

void RedisStore::start_release(const lock::LockName& name, const std::string& token)
{
  LockKeys k = keys(name);
  std::vector<std::string> script_keys{k.lock, k.holder, k.waiters, k.queue, k.queue_expiry, k.wake};
  const Script& script = scripts::release();
  std::vector<std::string> args{token, k.fair_wake_prefix};
  send(Outcome::Op::release, script.evalsha(script_keys, args), script.eval(script_keys, args));
}

void RedisStore::start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket)
{
  LockKeys k = keys(name);
  if (ticket.mode == lock::WaitMode::fair) {
    send(Outcome::Op::withdraw, {"ZREM", k.queue, ticket.waiter_id}, {}, false);
    send(Outcome::Op::withdraw, {"ZREM", k.queue_expiry, ticket.waiter_id});
  } else if (ticket.mode == lock::WaitMode::wait) {
    send(Outcome::Op::withdraw, {"ZREM", k.waiters, ticket.waiter_id});
  } else {
    m_ready.push_back(Outcome{Outcome::Op::withdraw, std::nullopt, false, {}, {}});
  }
}

void RedisStore::watch(util::EventLoop& loop)
{
  int fd = m_connection.fd();
  loop.watch(fd, m_connection.poll_events(), [this, fd](short revents) {
    if (m_connection.fd() == fd) { // not dropped by an earlier handler of the same round
      on_io(revents);
    }
  });
}

void RedisStore::on_io(short revents)
{
  try {
    m_connection.process_io(revents);
    while (std::optional<Reply> reply = m_connection.next_reply()) {
      on_reply(**reply);
    }
  } catch (const Error& error) {
    m_connection.reset();
    fail_all(error);
  }
}

void RedisStore::on_reply(const redisReply& reply)
{
  Pending pending = std::move(m_pending.front());
  m_pending.pop_front();
  if (!pending.eval.empty() && is_noscript(reply)) {
    // The script cache was flushed (restart, failover, SCRIPT FLUSH): send the body.
    std::vector<std::string> eval = std::move(pending.eval);
    send(std::move(pending), eval);
    return;
  }
  if (pending.awaiting_replicas) {
    Outcome outcome = std::move(*pending.awaiting_replicas);
    try {
      outcome.replicas_acknowledged = static_cast<int>(expect_integer(reply, "waiting for replicas"));
    } catch (const Error& error) {
      outcome.error = error;
    }
    m_ready.push_back(std::move(outcome));
    return;
  }
  if (!pending.last) {
    return;
  }
  Outcome outcome{pending.op, std::nullopt, false, {}, {}};
  try {
    switch (pending.op) {
    case Outcome::Op::acquire:
      outcome.acquire = parse_acquire(reply);
      break;
    case Outcome::Op::wait_for_wake:
      throw_if_error(reply, "waiting for the lock");
      break;
    case Outcome::Op::renew:
      outcome.held = expect_flag(reply, "renewing the lease");
      break;
    case Outcome::Op::release:
      outcome.held = expect_flag(reply, "releasing the lock");
      break;
    case Outcome::Op::withdraw:
      throw_if_error(reply, "withdrawing from the wait");
      break;
    case Outcome::Op::disconnected: // never sent: it is no request
      break;
    }
  } catch (const Error& error) {
    outcome.error = error;
  }
  bool written = !outcome.error && (outcome.acquire.acquired || outcome.held);
  if (pending.ack.replicas > 0 && written) {
    // WAIT counts the replicas that have every write of this connection so far.
    send(Pending{pending.op, {}, true, {}, std::move(outcome)},
         {"WAIT", std::to_string(pending.ack.replicas), ms_string(pending.ack.timeout)});
    return;
  }
  m_ready.push_back(std::move(outcome));
}

void RedisStore::fail_all(const Error& error)
{
  bool owed = false;
  for (const Pending& pending : m_pending) {
    if (pending.last) {
      m_ready.push_back(Outcome{pending.op, error, false, {}, {}});
      owed = true;
    }
  }
  m_pending.clear();
  if (!owed) {
    m_ready.push_back(Outcome{Outcome::Op::disconnected, error, false, {}, {}});
  }
}

std::optional<Outcome> RedisStore::next_outcome()
{
  if (m_ready.empty()) {
    return std::nullopt;
  }
  Outcome outcome = std::move(m_ready.front());
  m_ready.pop_front();
  return outcome;
}

void RedisStore::abandon() noexcept
{
  m_connection.reset();
  m_pending.clear();
  m_ready.clear();
}

Error RedisStore::timed_out() noexcept
{
  bool connecting = m_connection.connecting();
  std::string endpoint = m_connection.describe_endpoint();
  abandon();
  return Error(ExitCode::unavailable, "{}: {}", endpoint,
               connecting ? "timed out connecting" : "timed out waiting for a reply");
}

lock::LockStatus RedisStore::status(const lock::LockName& name, util::TimePoint deadline)
{
  return read_status(m_connection, m_prefix, name.str(), deadline);
}

std::vector<lock::LockStatus> RedisStore::list(std::string_view pattern, util::Millis timeout)
{
  return read_statuses(m_connection, m_prefix, scan_lock_names(m_connection, m_prefix, pattern, timeout),
                       timeout);
}

} // namespace dlock::redis
