#pragma once

#include "lock/outcome_queue.hpp"
#include "lock/store.hpp"
#include "util/clock.hpp"

#include <optional>
#include <string>

namespace dlock::sql {

// What the database stores (postgres://, mysql://) share: a lock is held by a database
// session, not a lease with a TTL, so a lock waiter has nothing to withdraw (a barrier's or
// latch's state is rows of their own: sql/coordination.hpp), and a lock is lost or left behind
// with its session. Answers wait in a queue that next_outcome() empties. Their client libraries
// connect without blocking (libpq's cancel request in abandon() aside), so limit_blocking is not
// needed.
class SessionStore : public lock::Store {
public:
  // Nothing is registered while waiting and fencing counters are the database's: at once.
  void start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket) override;

  std::optional<lock::Outcome> next_outcome() override;

protected:
  // idle_timeout_setting: the server setting that ends an idle session, named in messages.
  explicit SessionStore(std::string idle_timeout_setting);
  // The traits of a database store named name: a lock lost or left behind with its session.
  lock::StoreTraits session_traits(std::string name, lock::FeatureSet features) const;

  // Queues the answer to op: done, or failed with error.
  void answer(lock::Outcome::Op op, std::optional<Error> error = std::nullopt)
  {
    m_answers.answer(op, std::move(error));
  }
  void answer(lock::Outcome outcome) { m_answers.answer(std::move(outcome)); }
  bool has_answers() const { return !m_answers.empty(); }
  void forget_answers() noexcept { m_answers.clear(); }

private:
  std::string m_idle_timeout_setting;
  lock::OutcomeQueue m_answers;
};

// The soonest a database server may end dlock's session on its own (an idle time-out, a
// dead-peer detection), with the setting that decides it, for the TTL check.
struct SessionLimit {
  util::Millis after{0};
  std::string setting; // "idle_session_timeout 30s", as messages name it
};

// Keeps the soonest of the limits it is shown (zero: the setting is off).
class SoonestLimit {
public:
  void consider(util::Millis after, std::string setting);
  // TCP keepalives (idle + interval x count seconds; 0 takes Linux's default, 7200, 75, 9).
  void consider_keepalives(std::int64_t idle_s, std::int64_t interval_s, std::int64_t count,
                           const char* idle_name, const char* interval_name,
                           const char* count_name);
  const std::optional<SessionLimit>& soonest() const { return m_soonest; }

private:
  std::optional<SessionLimit> m_soonest;
};

// Refuses (Error(usage), one line) a TTL longer than limit, naming the setting and server
// ("PostgreSQL", "MySQL"): the server could free the lock before the lease runs out.
void check_ttl(util::Millis ttl, const std::optional<SessionLimit>& limit, std::string_view server);

} // namespace dlock::sql
