#pragma once

#include "stores/mysql/session.hpp"
#include "stores/mysql/url.hpp"
#include "stores/sql/coordination.hpp"

#include <map>
#include <memory>
#include <string>
#include <utility>

namespace dlock::mysql {

// wait, barrier and latch on MySQL / MariaDB (sql/coordination.hpp): the gates' rows in the
// table dlock_gate (keyed by the lock's GET_LOCK name, names.hpp) on a session of their own.
// MySQL has no notification, so a waiter blocks in the server in one statement that looks at
// its gate and sleeps only while it is shut (SELECT IF(shut, SLEEP(block), 0), 'dlock gate
// KEY'), and whatever opens the gate (a barrier that trips, a latch at zero, a dlock release)
// then ends the sleeps of that gate with KILL QUERY, found by their text in the process list:
// a statement that started before the change is there, one that starts after sees the gate
// open. The server shows and lets kill a user's own sessions only (without PROCESS and
// CONNECTION_ADMIN): a waiter of another user, or a lock's holder that ends without a
// release, is seen at the waiter's next look, within its block (a safety net of a few s).
class MysqlGates final : public sql::SqlGates {
public:
  MysqlGates(ConnectParams params, std::string prefix, Tell answer);

  void wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                     util::Millis block) override;
  void watch(util::EventLoop& loop) override;
  void abandon() noexcept override;
  // Ends the sleeps of the lock's watchers, on the session that let it go.
  void freed(const std::string& name, sql::Session& on, std::function<void()> then) override;

private:
  const Dialect& dialect() override { return m_dialect; }
  std::string key_of(const lock::LockName& name) override;
  void transact(const lock::LockName& name, std::vector<std::string> statements, int read,
                bool commit, bool notify, ReadThen then) override;
  void select(const lock::LockName& name, std::string statement, ReadThen then) override;
  void holding(const lock::LockName& name, HoldingThen then) override;

  Session& session();
  // The session that ends the sleeps of a gate's waiters (KILL QUERY), so that a KILL the
  // server is slow to carry out holds up no step of the gate session.
  Session& bell();
  // Makes dlock_gate if there is none (once per process), then then() or failed.
  void prepare(std::function<void()> then, std::function<void(Read)> failed);
  // Runs statements[at...] in order; then with the rows of statement read.
  void run(std::shared_ptr<std::vector<std::string>> statements, std::size_t at, int read,
           std::shared_ptr<Read> got, std::function<void(Read)> then);
  // Ends the sleeps of the gate of the prefixed lock name's waiters, on session s.
  static void ring(Session& s, const std::string& marker, std::function<void()> then);
  // The text that marks the sleeps of a prefixed lock name's waiters.
  static std::string marker_of(const std::string& prefixed);

  ConnectParams m_params;
  std::unique_ptr<Session> m_session;
  std::unique_ptr<Session> m_bell;
  Dialect m_dialect;
  bool m_table_ready = false;
  bool m_in_transaction = false;
  // watch: by lock name, a GET_LOCK name (SQL literal) of it and the connection last seen
  // holding it (the lock's own name, or a reader's or a --limit slot's).
  std::map<std::string, std::pair<std::string, std::int64_t>> m_holder;
};

} // namespace dlock::mysql
