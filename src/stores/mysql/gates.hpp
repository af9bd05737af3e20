#pragma once

#include "stores/mysql/session.hpp"
#include "stores/mysql/url.hpp"
#include "stores/sql/coordination.hpp"

#include <map>
#include <memory>
#include <optional>
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
// A leader watcher (dlock leader --watch) sleeps the same way while the lock's holder and its
// fencing row are the ones it saw; a dlock elect candidate that took the lock ends those sleeps
// (elected), as a release does.
class MysqlGates final : public sql::SqlGates {
public:
  MysqlGates(ConnectParams params, std::string prefix, Tell answer);

  // A candidate of dlock elect took the lock: ends the sleeps of its leader watchers, on the
  // session that holds it, then then() (the acquisition's answer).
  void elected(const std::string& name, sql::Session& on, std::function<void()> then) override;

  // What a leader watcher's look found.
  struct LeaderLook {
    std::int64_t connection = 0;       // the session that holds the lock (0: free)
    bool fence_read = false;           // dlock_fence was there to read
    std::int64_t fence_connection = 0; // the session that wrote the lock's row in it (0: none)
    std::int64_t fence = 0;            // that row's fencing token (0: none, or junk)
    lock::HolderInfo holder;           // who holds it, as status shows
  };
  // The term of a look (pure; unit-tested): the holder's fencing token when the holder wrote
  // it; a number of the holding session, above every fencing token, when it did not (another
  // client's GET_LOCK, no dlock_fence); 0 when the lock is free.
  static std::int64_t leader_term(const LeaderLook& look);
  // Whether the holder has not written its fencing row (yet: a dlock in the middle of its
  // acquisition writes it within moments, then wakes the watchers).
  static bool unwritten(const LeaderLook& look);

  void wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                     util::Millis block) override;
  void watch(util::EventLoop& loop) override;
  void abandon() noexcept override;
  // Ends the sleeps of the lock's watchers, on the session that let it go (those that
  // sleepers_found noted, if it did).
  void freed(const std::string& name, sql::Session& on, std::function<void()> then) override;
  // The statement that finds the sleeps a release of the lock ends, which unlock sends in the
  // round trip of the release, right after it; and what it found, for freed.
  std::string freed_sql(const std::string& name);
  void sleepers_found(const std::string& name, const Session& on, const Answer& a);

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
  // The statement that finds the sleeps of the marker's waiters, and the KILL QUERY of each
  // (not waited for) on s.
  static std::string ring_sql(const std::string& marker);
  static void kill_sleeps(Session& s, const Answer& a);
  // The text that marks the sleeps of a prefixed lock name's waiters (the leader watchers'
  // have it followed by leader_mark).
  static std::string marker_of(const std::string& prefixed);
  // The leader gate's look (SqlGates::start_gate decides): the term and the holder. A holder
  // that has not written its fencing row yet is waited for once (longest_settle_sleep, ended
  // by its elected()) and looked at again, so that a watcher is not shown one new leader twice
  // (its session, then its record).
  void leadership(const lock::LockName& name, LeadershipThen then) override;
  // One look: with_fence, with_policy: dlock_fence and dlock_policy are read (the next try goes
  // without one that is not there); settled: the wait for a holder's row is behind.
  void look_leader(const lock::LockName& name, bool with_fence, bool with_policy, bool settled,
                   LeadershipThen then);
  // The statement a leader watcher sleeps in while the lock's holder and fencing row are those
  // the last look saw (m_leader), at most block.
  std::string leader_sleep(const lock::LockName& name, util::Millis block);

  ConnectParams m_params;
  std::unique_ptr<Session> m_session;
  std::unique_ptr<Session> m_bell;
  Dialect m_dialect;
  bool m_table_ready = false;
  bool m_in_transaction = false;
  // watch: by lock name, a GET_LOCK name (SQL literal) of it and the connection last seen
  // holding it (the lock's own name, or a reader's or a --limit slot's).
  std::map<std::string, std::pair<std::string, std::int64_t>> m_holder;
  // leader: by lock name, what the last look saw, which a leader watcher sleeps while it
  // lasts: the holding connection (0: none) and, if dlock_fence was read, the text of the
  // lock's fence there (none: no row).
  struct LeaderSeen {
    std::int64_t connection = 0;
    bool fence_read = false;
    std::optional<std::string> fence;
  };
  std::map<std::string, LeaderSeen> m_leader;
  // by lock name: the sleeps that the release in progress ends (sleepers_found)
  std::map<std::string, std::pair<const Session*, Answer>> m_sleepers;
};

} // namespace dlock::mysql
