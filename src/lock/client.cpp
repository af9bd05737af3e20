#include "lock/client.hpp"

#include "lock/scripts.hpp"

namespace dlock::lock {

namespace {

std::string ms_string(util::Millis duration) { return std::to_string(duration.count()); }

// A script's 1/0 answer; anything else is an internal error.
bool expect_flag(const redisReply& reply, std::string_view what)
{
  long long value = redis::expect_integer(reply, what);
  if (value != 0 && value != 1) {
    throw Error(ExitCode::internal, "{}: unexpected reply (integer {})", what, value);
  }
  return value == 1;
}

} // namespace

LockClient::LockClient(redis::Connection& connection, LockKeys keys)
  : m_connection(connection), m_keys(std::move(keys))
{
}

namespace {

const char* mode_name(WaitMode mode)
{
  switch (mode) {
  case WaitMode::wait:
    return "wait";
  case WaitMode::fair:
    return "fair";
  case WaitMode::once:
    break;
  }
  return "once";
}

} // namespace

AcquireResult LockClient::try_acquire(const std::string& token, util::Millis ttl,
                                      const HolderInfo& me, const WaitTicket& ticket,
                                      util::TimePoint deadline)
{
  redis::Reply reply = scripts::acquire().run(
    m_connection,
    {m_keys.lock, m_keys.fence, m_keys.holder, m_keys.waiters, m_keys.queue, m_keys.queue_expiry},
    {token, ms_string(ttl), me.host, std::to_string(me.pid), me.user, me.command,
     ticket.waiter_id, mode_name(ticket.mode), ms_string(ticket.max_block)},
    deadline);
  redis::throw_if_error(*reply, "acquiring the lock");
  auto unexpected = [&] {
    return Error(ExitCode::internal, "acquiring the lock: unexpected reply ({})",
                 redis::describe(*reply));
  };
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2
      || reply->element[0]->type != REDIS_REPLY_INTEGER
      || reply->element[1]->type != REDIS_REPLY_INTEGER) {
    throw unexpected();
  }
  AcquireResult result;
  result.acquired = reply->element[0]->integer == 1;
  if (result.acquired) {
    result.fence = reply->element[1]->integer;
    return result;
  }
  if (reply->elements != 4 || reply->element[3]->type != REDIS_REPLY_INTEGER) {
    throw unexpected();
  }
  result.holder_ttl_ms = reply->element[1]->integer;
  result.holder = HolderInfo::from_hash(*reply->element[2]);
  result.block = util::Millis(reply->element[3]->integer);
  return result;
}

void LockClient::send_wait(const WaitTicket& ticket, util::Millis block)
{
  const std::string& list =
    ticket.mode == WaitMode::fair ? m_keys.wake_for(ticket.waiter_id) : m_keys.wake;
  m_connection.send({"BLPOP", list, fmt::format("{:.3f}", static_cast<double>(block.count()) / 1000)});
}

void LockClient::withdraw(const WaitTicket& ticket, util::TimePoint deadline)
{
  if (ticket.mode == WaitMode::fair) {
    m_connection.call({"ZREM", m_keys.queue, ticket.waiter_id}, deadline);
    m_connection.call({"ZREM", m_keys.queue_expiry, ticket.waiter_id}, deadline);
  } else if (ticket.mode == WaitMode::wait) {
    m_connection.call({"ZREM", m_keys.waiters, ticket.waiter_id}, deadline);
  }
}

bool LockClient::renew(const std::string& token, std::optional<util::Millis> ttl,
                       util::TimePoint deadline)
{
  redis::Reply reply = scripts::renew().run(
    m_connection, {m_keys.lock, m_keys.holder},
    {token, ttl ? ms_string(*ttl) : std::string(), ttl ? "1" : "0"}, deadline);
  return expect_flag(*reply, "renewing the lease");
}

bool LockClient::release(const std::string& token, util::TimePoint deadline)
{
  redis::Reply reply = scripts::release().run(m_connection, release_keys(), {token}, deadline);
  return expect_flag(*reply, "releasing the lock");
}

bool LockClient::force_release(util::TimePoint deadline)
{
  redis::Reply reply = scripts::release().run(m_connection, release_keys(), {""}, deadline);
  return expect_flag(*reply, "releasing the lock");
}

std::vector<std::string> LockClient::release_keys() const
{
  return {m_keys.lock, m_keys.holder, m_keys.waiters, m_keys.queue, m_keys.queue_expiry, m_keys.wake};
}

void LockClient::send_renew(const std::string& token, util::Millis ttl, bool with_source)
{
  const redis::Script& script = scripts::renew();
  std::vector<std::string> keys{m_keys.lock, m_keys.holder};
  std::vector<std::string> args{token, ms_string(ttl), "0"};
  m_connection.send(with_source ? script.eval(keys, args) : script.evalsha(keys, args));
}

std::optional<bool> LockClient::parse_renew(const redisReply& reply) const
{
  if (redis::is_noscript(reply)) {
    return std::nullopt;
  }
  return expect_flag(reply, "renewing the lease");
}

} // namespace dlock::lock
