#pragma once

#include "lock/store.hpp"
#include "stores/config.hpp"
#include "stores/postgres/advisory.hpp"
#include "stores/postgres/fence_table.hpp"
#include "stores/postgres/semaphore.hpp"
#include "stores/postgres/session.hpp"
#include "stores/postgres/session_lifetime.hpp"
#include "stores/sql/sql_store.hpp"

#include <functional>
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
// it (man dlock, DATABASE STORES); the side records of the policies from dlock_policy, found
// and trusted the same way (sql_store.hpp). --limit N is N more advisory locks
// (semaphore.hpp); --fair a ticket queue in dlock_queue, found and trusted the same way.
class PostgresStore final : public sql::SqlStore {
public:
  PostgresStore(ConnectParams params, std::string prefix);

  // Exclusive and shared locks, semaphores (--limit) and a --fair queue; wait, barrier and latch
  // (gates.hpp); no lock outlives its session's process.
  const lock::StoreTraits& traits() const noexcept override { return m_traits; }

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

private:
  // The steps of the chain (sql_store.hpp) in PostgreSQL's SQL.
  std::unique_ptr<sql::Session> open_session(const Named& n) override;
  std::unique_ptr<sql::Session> open_control() override;
  void read_limit(const std::string& name, const lock::AcquireRequest& request) override;
  // Finds dlock_fence (once per process, before the first lock is taken).
  void before_first_try(const std::string& name, std::function<void()> then) override;
  // Refuses an exclusive or shared lock just taken while a semaphore holds the name.
  void after_taken(const std::string& name, std::function<void()> then) override;
  void try_lock(const std::string& name, const lock::AcquireRequest& request) override;
  void take_fence(const std::string& name, bool again) override;
  void report_holder(const std::string& name, const lock::AcquireRequest& request) override;
  void wait_in_server(const std::string& name, util::Millis block) override;
  void confirm_held(const std::string& name) override;
  void confirm_other(const lock::LockName& name, const std::string& token) override;
  void unlock(const std::string& name) override;
  void end_holder(const lock::LockName& name, const std::string& token) override;
  void read_policy(const std::string& name, bool control, bool create, PolicyThen then) override;
  void write_policy(const std::string& name, bool control, const PolicyWrite& write,
                    WriteThen then) override;
  void let_go(const std::string& name) override;
  std::vector<NamedPolicy> list_policies(util::TimePoint deadline, std::int64_t& now) override;
  // One statement: the insert, the trim and the expiry (sql/history.hpp), committed
  // asynchronously (a history loses its last events in a server crash at worst).
  void write_history(const std::string& name, bool control, const std::string& text,
                     RecordThen then) override;
  // retried: written again once after a deadlock with another holder's record of the same lock
  // (a hand-over writes two at once).
  void write_history(const std::string& name, bool control, const std::string& text,
                     RecordThen then, bool retried);
  void read_history(const std::string& name, std::size_t limit,
                    std::function<void(HistoryRead)> then) override;

  // The name's session.
  Session& session(const std::string& name) { return session_as<Session>(name); }
  // The session for status, list, --force and tokens held by another process.
  Session& control() { return control_as<Session>(); }
  // The advisory key of the lock name's session.
  AdvisoryKey key_of(const std::string& name) { return AdvisoryKey::of(m_named.at(name).prefixed); }
  // Finds dlock_fence (once per process) and goes on with then, or with failed (an untrusted
  // table: Error(config)).
  void find_fence(Session& session, std::function<void()> then,
                  std::function<void(const Error&)> failed);
  // The session for the name's side record: its own, or control.
  Session& policy_session(const std::string& name, bool control);
  // Finds dlock_policy (once per process), makes it if create and there is none, then reads
  // the lock's row.
  void find_policy(const std::string& name, bool control, bool create, PolicyThen then);
  void select_policy(const std::string& name, bool control, bool create, PolicyThen then);
  // select_policy's answer a, read on its own or with the try (m_prefetched), into then.
  void policy_read(const std::string& name, bool control, bool create, const PolicyThen& then,
                   const Answer& a);
  // The query of the side record of key (a parameter, or a number).
  std::string policy_read_sql(const std::string& key) const;
  // Finds dlock_history (once per process) on the name's session (or control), making it if
  // create and there is none; then(error), error being m_no_history when it cannot be used.
  void find_history(const std::string& name, bool control, bool create,
                    std::function<void(const std::optional<Error>&)> then, bool created = false);
  // dlock_history's statements for the name's key and name as parameters $1 and $2.
  sql::HistorySql history_sql() const;
  // Takes dlock_policy from m_found_policy when that shows a trusted table (else find_policy
  // looks at it in its turn).
  void adopt_found_policy();
  // write_policy; with_fence: a claim that a fencing token follows goes with it, in one
  // statement (take_fence then answers with its token), or alone if that one fails.
  void write_record(const std::string& name, bool control, const PolicyWrite& write, WriteThen then,
                    bool with_fence);
  // The statement that counts the fencing token up ($1: the key, $2: the prefixed name).
  std::string fence_sql() const;
  // no_fencing(name, why), once the holder's record written asynchronously (m_unflushed) is
  // flushed: no lock is answered before its holder's record is durable.
  void without_fence(const std::string& name, const std::string& why);
  // Lets go of a lock just taken and answers the acquisition with error.
  void give_back(const std::string& name, const Error& error);
  // Blocking query on the control session (status, list).
  Answer ask(const std::string& sql, std::vector<std::string> params, util::TimePoint deadline);
  // dlock_fence for status and list (found on the control session if not yet); empty if
  // there is none.
  std::string fence_table(util::TimePoint deadline);

  // --limit N: the name's semaphore (semaphore.hpp) as this process's session holds it.
  struct Held {
    bool marker = false;     // the kind marker of N is held (shared), from the first try on
    std::optional<int> slot; // the slot held
    int turn = 0;            // the slot the next wait in the server blocks on
    // --fair: this session's ticket in dlock_queue (its ticket lock held), and the ticket
    // right ahead of it, whose ticket lock the next wait blocks on (none: the first).
    std::optional<std::int64_t> ticket;
    std::optional<std::int64_t> ahead;
  };
  // --fair (first come, first served): a ticket in dlock_queue, ordered by the table's
  // identity column; each waiter holds the advisory lock of its ticket (fair_class, ticket)
  // while it waits, which makes its row live: rows of sessions that do not hold theirs (dead
  // waiters, another tenant's junk) are deleted. The first ticket tries the lock and waits in
  // the server's queue for it; each other waits on the ticket lock of the one ahead of it.
  void try_fair(const std::string& name, const lock::AcquireRequest& request);
  // Finds dlock_queue (once per process), making it if there is none; then(error).
  void find_queue(const std::string& name, std::function<void(const std::optional<Error>&)> then,
                  bool created = false);
  // Leaves the queue (the lock is taken): deletes the ticket and lets its lock go; then().
  void leave_queue(const std::string& name, std::function<void()> then);
  // The semaphore steps: the marker, the kind check, a free slot; a wait on one slot.
  void try_semaphore(const std::string& name, const lock::AcquireRequest& request);
  void try_slot(const std::string& name, const lock::AcquireRequest& request);
  void report_slots(const std::string& name, const lock::AcquireRequest& request);
  // Lets go of the marker (and the slot) and refuses the acquisition: the key is held as kind.
  void refuse_kind(const std::string& name, lock::LockKind kind);
  // The semaphore state of the name's session (by prefixed name: a new session starts afresh).
  Held& held_of(const std::string& name) { return m_held[m_named.at(name).prefixed]; }
  // Adds the holders of the name's semaphore (key) to a status that K's holders left free.
  void semaphore_status(lock::LockStatus& status, AdvisoryKey key, util::TimePoint deadline);
  // Adds the semaphores (and their slot holders) of the names in dlock_fence (table) to list.
  void list_semaphores(std::vector<lock::LockStatus>& found, const std::string& table,
                       util::TimePoint deadline);
  // The SQL that lets go of what the name's semaphore session holds.
  std::string unlock_semaphore_sql(const std::string& name);

  ConnectParams m_params;
  std::map<std::string, Held> m_held;  // by prefixed name
  std::optional<FenceTable> m_fence;   // where dlock_fence is, once looked for
  std::optional<FenceTable> m_policy;  // where dlock_policy is, once looked for
  std::optional<FenceTable> m_queue;   // where dlock_queue is, once looked for
  std::optional<FenceTable> m_history; // where dlock_history is, once looked for
  // The holder records written asynchronously that the fencing token's write has not yet
  // flushed, by lock name (write_policy, without_fence).
  std::map<std::string, PolicyWrite> m_unflushed;
  // The fencing token taken in the statement of the holder's record (write_record), by lock
  // name, for take_fence to answer with.
  std::map<std::string, Answer> m_fenced_with_claim;
  // What read_limit read of dlock_fence and dlock_policy (fence_table_from's rows), for
  // find_fence and find_policy to take.
  std::optional<Rows> m_found_fence;
  std::optional<Rows> m_found_policy;
  // What try_lock read of dlock_history, for find_history to take.
  std::optional<Rows> m_found_history;
  // What try_lock read right after it took the name's lock, for after_taken and check_policy.
  struct Prefetched {
    std::string name;
    std::optional<Rows> markers{};  // the semaphore markers of its key
    std::optional<Answer> policy{}; // its side record
  };
  std::optional<Prefetched> m_prefetched;
  // The sweep of the side records (write_policy), sent after the name's unlock: sql, params.
  std::map<std::string, std::pair<std::string, std::vector<std::string>>> m_sweeps;
  lock::StoreTraits m_traits =
    session_traits("PostgreSQL (postgres://)", lock::features_of(lock::StoreKind::postgres));
};

} // namespace dlock::postgres
