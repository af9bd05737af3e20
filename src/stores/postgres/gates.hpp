#pragma once

#include "stores/postgres/advisory.hpp"
#include "stores/postgres/fence_table.hpp"
#include "stores/postgres/session.hpp"
#include "stores/sql/coordination.hpp"

#include <memory>
#include <optional>
#include <set>
#include <string>

namespace dlock::postgres {

// wait, barrier and latch on PostgreSQL (sql/coordination.hpp): the gates' rows in the table
// dlock_gate (keyed by the lock name's advisory key), found and trusted as dlock_fence is,
// on a session of their own that LISTENs on the channel dlock_gate_KEY (16 hex digits of the
// advisory key). A barrier that trips, a latch that reaches zero and a dlock release (or
// --force) of the lock NOTIFY it, so waiters are woken without polling; a holder whose
// session ends without a release (killed, or not dlock) is not announced: a watcher looks
// again every few seconds as a safety net.
// A leader watcher (leadership()) LISTENs on the same channel, which a candidate of dlock
// elect also NOTIFYs once its holder record and fencing token are written (elected()); its
// term is the lock's fencing token in dlock_fence while held (see leadership()).
class PostgresGates final : public sql::SqlGates {
public:
  PostgresGates(ConnectParams params, std::string prefix, Tell answer);

  void wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                     util::Millis block) override;
  void watch(util::EventLoop& loop) override;
  void abandon() noexcept override;
  // NOTIFYs the lock's channel on the session that let it go.
  void freed(const std::string& name, sql::Session& on, std::function<void()> then) override;
  // NOTIFYs the lock's channel on the session of the candidate that took it.
  void elected(const std::string& name, sql::Session& on, std::function<void()> then) override;

private:
  const Dialect& dialect() override { return m_dialect; }
  std::string key_of(const lock::LockName& name) override;
  void transact(const lock::LockName& name, std::vector<std::string> statements, int read,
                bool commit, bool notify, ReadThen then) override;
  void select(const lock::LockName& name, std::string statement, ReadThen then) override;
  void holding(const lock::LockName& name, HoldingThen then) override;
  // The holder of the lock's advisory key (the first, if shared), shown as its side record in
  // dlock_policy names it (with its value) when the record is that session's; the term is the
  // name's fencing token in dlock_fence, else the recorded holder's acquisition time, else
  // the holding session's start in µs (another client's, or no table): never 0 while held.
  void leadership(const lock::LockName& name, LeadershipThen then) override;
  // Finds dlock_fence and dlock_policy for the leader gate (each looked for again while there
  // is none: a candidate may create it), then then(), or failed (an untrusted dlock_fence).
  void find_side_tables(std::function<void()> then, std::function<void(const Error&)> failed);
  // The leadership query itself (once more without a side table that turned out unusable).
  void read_leadership(const lock::LockName& name, LeadershipThen then);
  // NOTIFYs the name's channel on session on, then then() whatever came of it.
  void ring(const std::string& name, sql::Session& on, std::function<void()> then);

  // The gate session, opened on first use.
  Session& session();
  // Listens on the name's channel (once), finds or makes dlock_gate if table, then then()
  // (or failed with what went wrong).
  void prepare(const lock::LockName& name, bool table, std::function<void()> then,
               std::function<void(Read)> failed);
  // The name's channel.
  std::string channel(const std::string& name) const;

  ConnectParams m_params;
  std::unique_ptr<Session> m_session;
  std::optional<FenceTable> m_table;
  // dlock_fence and dlock_policy for the leader gate (empty table: none, or unusable).
  std::optional<FenceTable> m_fence_table;
  std::optional<FenceTable> m_policy_table;
  Dialect m_dialect;
  std::set<std::string> m_listening; // channels the session LISTENs on
  std::set<std::string> m_rung;      // channels notified since their gate was last looked at
  bool m_in_transaction = false;
  // The wake-up awaited: its channel, and when the block ends.
  struct Wake {
    std::string channel;
    util::TimePoint at;
  };
  std::optional<Wake> m_wake;
};

} // namespace dlock::postgres
