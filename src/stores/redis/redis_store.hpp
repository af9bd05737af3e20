#pragma once

#include "lock/store.hpp"
#include "stores/redis/connection.hpp"
#include "stores/redis/keys.hpp"

#include <deque>
#include <optional>

namespace dlock::redis {

// The lock protocol on one Redis server (a lock is a key holding the holder's token, with the
// lease as its TTL; Lua scripts make every step atomic), over one pipelined connection.
class RedisStore final : public lock::Store {
public:
  RedisStore(ConnectOptions options, std::string prefix);

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
  void limit_blocking(util::Millis limit) noexcept override { m_connection.limit_blocking(limit); }

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

private:
  // A command sent whose reply is still owed, and what to make of it.
  struct Pending {
    lock::Outcome::Op op;
    std::vector<std::string> eval; // a script's EVAL form, sent again after NOSCRIPT
    bool last = true;              // false: a step of the op whose outcome comes later
    lock::ReplicaAck ack{};        // replicas the write must reach before its outcome counts
    // The script's outcome, held back while the WAIT for its replicas is answered.
    std::optional<lock::Outcome> awaiting_replicas{};
  };

  LockKeys keys(const lock::LockName& name) const { return LockKeys::make(m_prefix, name.str()); }
  void send(lock::Outcome::Op op, std::vector<std::string> argv, std::vector<std::string> eval = {},
            bool last = true);
  void send(Pending pending, const std::vector<std::string>& argv);
  void on_io(short revents);
  void on_reply(const redisReply& reply);
  void fail_all(const Error& error);

  Connection m_connection;
  std::string m_prefix;
  std::deque<Pending> m_pending;
  std::deque<lock::Outcome> m_ready;
};

} // namespace dlock::redis
