#pragma once

#include "lock/store.hpp"
#include "stores/mysql/names.hpp"
#include "stores/mysql/session.hpp"
#include "stores/mysql/session_lifetime.hpp"
#include "stores/mysql/url.hpp"
#include "stores/sql/sql_store.hpp"

#include <functional>
#include <map>
#include <memory>

namespace dlock::mysql {

// Locks as MySQL / MariaDB user-level locks (GET_LOCK). The lease is the session: each lock
// name has a connection of its own, whose session holds the lock until it releases it or
// ends (dlock exits, is killed, or the server ends the session), so nothing is left behind on
// any path. A renewal confirms that the session still holds the lock; a session that ended
// has lost it. Waiting blocks in GET_LOCK(name, seconds): the server wakes the waiter when
// the holder lets go. Fencing tokens come from the table dlock_fence where dlock may create
// it (man dlock, DATABASE STORES); the side records of the policies from dlock_policy beside
// it (sql_store.hpp). --shared and --limit N are made of more GET_LOCK names (names.hpp);
// --fair of tickets in dlock_queue beside them.
class MysqlStore final : public sql::SqlStore {
public:
  MysqlStore(ConnectParams params, std::string prefix);

  // Exclusive locks and semaphores (--limit N: N GET_LOCK names, names.hpp); GET_LOCK has no
  // shared mode, and no lock outlives its session's process.
  const lock::StoreTraits& traits() const noexcept override { return m_traits; }

  lock::LockStatus status(const lock::LockName& name, util::TimePoint deadline) override;
  std::vector<lock::LockStatus> list(std::string_view pattern, util::Millis timeout) override;

private:
  // The steps of the chain (sql_store.hpp) in MySQL's SQL.
  std::unique_ptr<sql::Session> open_session(const Named& n) override;
  std::unique_ptr<sql::Session> open_control() override;
  void read_limit(const std::string& name, const lock::AcquireRequest& request) override;
  void try_lock(const std::string& name, const lock::AcquireRequest& request) override;
  // Takes the token's lock (names.hpp), by which another process given the token finds the
  // session.
  void after_taken(const std::string& name, std::function<void()> then) override;
  void take_fence(const std::string& name, bool created_table) override;
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
  // One round trip, one transaction: the insert, the trim and the expiry (sql/history.hpp);
  // created: the table was made for this record; retried: it was written again once after a
  // deadlock with another holder's record of the same lock (a hand-over writes two at once).
  void write_history(const std::string& name, bool control, const std::string& text,
                     RecordThen then) override;
  void write_history(const std::string& name, bool control, const std::string& text,
                     RecordThen then, bool created, bool retried);
  void read_history(const std::string& name, std::size_t limit,
                    std::function<void(HistoryRead)> then) override;

  // The name's session.
  Session& session(const std::string& name) { return session_as<Session>(name); }
  // The session for status, list, --force and tokens held by another process.
  Session& control() { return control_as<Session>(); }
  // GET_LOCK's name for the lock name, as an SQL literal.
  std::string lock_bytes(const std::string& name);
  // dlock_history's statements for the lock name, with literals.
  sql::HistorySql history_sql(const std::string& name) const;
  // with_fence: read the holder's dlock_fence row too (else the server's view alone).
  void report_holder(const std::string& name, const lock::AcquireRequest& request, bool with_fence);
  // The statement that reads the name's side record, with the server's clock.
  std::string policy_sql(const std::string& name);
  // The same, to send in the round trip that takes the lock (none: no table to read).
  std::optional<std::string> prefetch_policy_sql(const std::string& name);
  // Keeps answer at of all for the acquisition's read of the side record, if got (the lock).
  void prefetched_policy(const std::string& name, bool got, std::vector<Answer>& all,
                         std::size_t at);
  // What read_policy does with the answer.
  void policy_read(const std::string& name, bool control_session, bool create,
                   const PolicyThen& then, Answer& a);
  // The session for the name's side record: its own, or control.
  Session& policy_session(const std::string& name, bool control);
  // release --force of a name held as shared or a semaphore: ends every holder's connection
  // (the reader names, and the first status_slots slots).
  void end_slot_holders(const lock::LockName& name);
  // The steps of release --force: end the holding connection, then see the lock freed.
  void kill_holder(const lock::LockName& name, const std::string& token,
                   const std::string& server_name, std::int64_t connection);
  void confirm_freed(const lock::LockName& name, const std::string& token,
                     const std::string& server_name, std::int64_t connection, int tries);
  // Blocking query on the control session (status, list).
  Answer ask(const std::string& sql, util::TimePoint deadline);

  // --limit N and --shared: what the name's session holds besides (or instead of) the
  // writer's name, and what its next wait blocks on.
  struct Held {
    std::optional<int> slot;   // --limit: the slot held
    std::optional<int> reader; // --shared: the reader name held
    // exclusive: the writer's name is held, but shared holders are still in (a waiting writer)
    bool writer = false;
    // the name the next wait blocks on and gives back at once (a reader name), else the lock's
    std::optional<std::string> wait_on;
    int turn = 0;
    // --fair: this session's ticket in dlock_queue (its waiter's name held); the waiter's name
    // of the ticket right ahead, which the next wait blocks on; first: the next try is the
    // lock's own (the ticket is the first).
    std::optional<std::int64_t> ticket;
    std::optional<std::string> ahead;
    bool first = false;
    // the release's side record write cleared the command line of dlock_fence already
    bool forgotten = false;
    // the release's sweep of other locks' records, which unlock sends after the release
    std::string sweep;
    // the holder's record (its claim) arms a min-hold or a lock-delay
    bool armed = false;
    // the last read of the record found it arming a min-hold or a lock-delay
    bool read_armed = false;
    // the release's statements that unlock sends after the release (an unarmed record's)
    std::vector<std::string> after_release;
    // the side record, read in the round trip that took the lock (read_policy's next answer)
    std::optional<Answer> policy;
  };
  // --fair (first come, first served): a ticket in dlock_queue, ordered by its counter; each
  // waiter holds its waiter's GET_LOCK name while it waits, which makes its row live (rows
  // whose name no session holds are deleted: dead waiters, another tenant's junk). The first
  // ticket tries the lock and waits for it in the server; each other waits on the name of the
  // waiter ahead of it. created: the table was made in this attempt.
  void enqueue(const std::string& name, const lock::AcquireRequest& request, bool created);
  void try_fair(const std::string& name, const lock::AcquireRequest& request);
  // --shared and the exclusive lock beside it (names.hpp): a waiting exclusive holder keeps
  // the writer's name and waits for the readers in (waited: answers the wait, else the
  // attempt); a shared holder takes the writer's name for a moment, then a free reader name.
  void check_readers(const std::string& name, const lock::AcquireRequest& request, bool waited);
  // The statement that check_readers sends, and what it does with the answer.
  std::string readers_and_slots_sql(const std::string& name);
  void readers_found(const std::string& name, const lock::AcquireRequest& request, bool waited,
                     Answer& a);
  void try_shared(const std::string& name, const lock::AcquireRequest& request);
  // Takes the first free reader name, then gives back the writer's name (then: taken).
  void take_reader(const std::string& name,
                   std::function<void(const std::optional<Error>&, bool)> then);
  // The writer's name is held: by an exclusive holder, or a writer waiting (writer first).
  void report_writer(const std::string& name, const lock::AcquireRequest& request);
  // The name that the name's session holds as its lock, as an SQL literal ("NULL": none).
  std::string held_lock(const std::string& name);
  // The semaphore steps: the first free slot from first on, then the kind check.
  void try_slots(const std::string& name, const lock::AcquireRequest& request, int first);
  void slot_taken(const std::string& name, const lock::AcquireRequest& request, int slot);
  // The name's semaphore state (by prefixed name: a new session starts afresh).
  Held& held_of(const std::string& name) { return m_held[m_named.at(name).prefixed]; }
  // The holders of a semaphore's first slots, for status.
  void semaphore_status(lock::LockStatus& status, util::TimePoint deadline);

  ConnectParams m_params;
  std::map<std::string, Held> m_held; // by prefixed name
  bool m_policy_made = false;         // dlock_policy was created, or found, in this process
  lock::StoreTraits m_traits =
    session_traits("MySQL or MariaDB (mysql://)", lock::features_of(lock::StoreKind::mysql));
};

} // namespace dlock::mysql
