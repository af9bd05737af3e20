#pragma once

#include "lock/store.hpp"
#include "stores/config.hpp"
#include "stores/postgres/advisory.hpp"
#include "stores/postgres/fence_table.hpp"
#include "stores/postgres/session.hpp"
#include "stores/postgres/session_lifetime.hpp"
#include "stores/sql/session_store.hpp"

#include <deque>
#include <map>
#include <memory>
#include <optional>

namespace dlock::postgres {

// Whether a URL names a PostgreSQL server (postgres://, postgresql://).
bool is_postgres_url(const std::string& url);

// How to reach the server of url: checks it with libpq's own parser (Error(usage) naming what
// is wrong), without connecting; --password-file wins over a password in the URL; --tls-*
// without sslmode (in the URL or PGSSLMODE) means sslmode=verify-full.
ConnectParams connect_params(const std::string& url, const stores::StoreConfig& config);

// Locks as PostgreSQL session-level advisory locks. The lease is the session: each lock name
// has a connection of its own, whose session holds the lock until it unlocks or ends (dlock
// exits, is killed, or the server ends the session), so nothing is left behind on any path.
// A renewal confirms that the session still holds the lock; a session that ended has lost
// it. Waiting blocks in pg_advisory_lock under lock_timeout: the server wakes the waiter when
// the holder lets go. Fencing tokens come from the table dlock_fence where dlock may create
// it (man dlock, DATABASE STORES).
class PostgresStore final : public sql::SessionStore {
public:
  PostgresStore(ConnectParams params, std::string prefix);

  void start_acquire(const lock::LockName& name, const lock::AcquireRequest& request) override;
  void start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                           util::Millis block) override;
  void start_renew(const lock::LockName& name, const lock::RenewRequest& request) override;
  void start_release(const lock::LockName& name, const std::string& token) override;

  void watch(util::EventLoop& loop) override;
  // Keeps every session that holds a lock (ending it would free the lock under a running
  // command); the others are cancelled and closed.
  void abandon() noexcept override;
  Error timed_out() noexcept override;

  // Exclusive and shared locks; no semaphore, queue or coordination state that a crash would
  // not leave behind; and no lock outlives its session's process.
  const lock::StoreTraits& traits() const noexcept override { return m_traits; }

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

private:
  // One lock name's session, and what it holds.
  struct Named {
    std::unique_ptr<Session> session;
    AdvisoryKey key;
    std::string prefixed;          // prefix + name, as hashed and kept in dlock_fence
    lock::LockKind kind{};         // as the last acquisition asked
    std::string token;             // of the last acquisition
    bool held = false;             // the session holds the lock (granted, not unlocked)
    bool granted_by_wait = false;  // held through a wait, not yet answered as acquired
    std::optional<SessionSettings> settings;
  };
  using Op = lock::Outcome::Op;

  // The name's session, opened for token if there is none this process can use.
  Named& named(const lock::LockName& name, const std::string& token, const lock::HolderInfo& me);
  Named* find(const lock::LockName& name);
  // The session for status, list, --force and tokens held by another process.
  Session& control();
  // The steps of an acquisition, each run from the previous one's answer.
  void read_settings(const std::string& name, const lock::AcquireRequest& request);
  // Finds dlock_fence (once per process, before the first lock is taken) and goes on with
  // then, or with failed (an untrusted table: Error(config)).
  void find_fence(Session& session, std::function<void()> then,
                  std::function<void(const Error&)> failed);
  void try_lock(const std::string& name, const lock::AcquireRequest& request);
  // looked_again: dlock_fence was created or looked for again once in this acquisition.
  void take_fence(const std::string& name, bool looked_again);
  // Lets go of a lock just taken and answers the acquisition with error.
  void give_back(const std::string& name, const Error& error);
  void report_holder(const std::string& name, const lock::AcquireRequest& request);
  // Blocking query on the control session (status, list).
  Answer ask(const std::string& sql, std::vector<std::string> params, util::TimePoint deadline);
  // dlock_fence for status and list (found on the control session if not yet); empty if
  // there is none.
  std::string fence_table(util::TimePoint deadline);

  ConnectParams m_params;
  std::string m_prefix;
  std::map<std::string, Named> m_named; // by lock name
  std::unique_ptr<Session> m_control;
  bool m_fencing = true; // false once dlock_fence turned out not writable
  std::optional<FenceTable> m_fence; // where dlock_fence is, once looked for
  lock::StoreTraits m_traits =
    session_traits("PostgreSQL (postgres://)", lock::features_of(lock::StoreKind::postgres));
};

} // namespace dlock::postgres
