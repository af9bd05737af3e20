#pragma once

#include "lock/store.hpp"
#include "stores/mysql/names.hpp"
#include "stores/mysql/session.hpp"
#include "stores/mysql/session_lifetime.hpp"
#include "stores/sql/session_store.hpp"
#include "stores/mysql/url.hpp"

#include <deque>
#include <map>
#include <memory>
#include <optional>

namespace dlock::mysql {

// Locks as MySQL / MariaDB user-level locks (GET_LOCK). The lease is the session: each lock
// name has a connection of its own, whose session holds the lock until it releases it or
// ends (dlock exits, is killed, or the server ends the session), so nothing is left behind on
// any path. A renewal confirms that the session still holds the lock; a session that ended
// has lost it. Waiting blocks in GET_LOCK(name, seconds): the server wakes the waiter when
// the holder lets go. Fencing tokens come from the table dlock_fence where dlock may create
// it (man dlock, DATABASE STORES). Exclusive locks only.
class MysqlStore final : public sql::SessionStore {
public:
  MysqlStore(ConnectParams params, std::string prefix);

  void start_acquire(const lock::LockName& name, const lock::AcquireRequest& request) override;
  void start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                           util::Millis block) override;
  void start_renew(const lock::LockName& name, const lock::RenewRequest& request) override;
  void start_release(const lock::LockName& name, const std::string& token) override;

  void watch(util::EventLoop& loop) override;
  // Keeps every session that holds a lock (ending it would free the lock under a running
  // command); the others are closed, which ends a GET_LOCK that waits.
  void abandon() noexcept override;
  Error timed_out() noexcept override;

  // One exclusive lock per name: GET_LOCK has no shared mode, and no lock outlives its
  // session's process.
  const lock::StoreTraits& traits() const noexcept override { return m_traits; }

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

private:
  // One lock name's session, and what it holds.
  struct Named {
    std::unique_ptr<Session> session;
    std::string prefixed;         // prefix + name, as kept in dlock_fence
    std::string server_name;      // GET_LOCK's name for it (names.hpp)
    std::string token;            // of the last acquisition
    lock::HolderInfo holder;      // of the last acquisition, written in dlock_fence
    bool held = false;            // the session holds the lock (granted, not released)
    bool granted_by_wait = false; // held through a wait, not yet answered as acquired
    bool closing = false;         // released: the session ends once idle
    std::optional<SessionSettings> settings;
  };
  using Op = lock::Outcome::Op;

  // The name's session, opened if there is none this process can use.
  Named& named(const lock::LockName& name);
  Named* find(const lock::LockName& name);
  // The session for status, list, --force and tokens held by another process.
  Session& control();
  // The steps of an acquisition, each run from the previous one's answer.
  void read_settings(const std::string& name, const lock::AcquireRequest& request);
  void try_lock(const std::string& name, const lock::AcquireRequest& request);
  void take_token_lock(const std::string& name, std::function<void()> then);
  void take_fence(const std::string& name, bool created_table);
  void report_holder(const std::string& name, const lock::AcquireRequest& request, bool with_fence);
  // The steps of release --force: end the holding connection, then see the lock freed.
  void kill_holder(const std::string& server_name, std::int64_t connection);
  void confirm_freed(const std::string& server_name, std::int64_t connection, int tries);
  // Blocking query on the control session (status, list).
  Answer ask(const std::string& sql, util::TimePoint deadline);

  ConnectParams m_params;
  std::string m_prefix;
  std::map<std::string, Named> m_named; // by lock name
  std::unique_ptr<Session> m_control;
  bool m_fencing = true; // false once dlock_fence turned out not writable
  lock::StoreTraits m_traits =
    session_traits("MySQL or MariaDB (mysql://)", lock::features_of(lock::StoreKind::mysql));
};

} // namespace dlock::mysql
