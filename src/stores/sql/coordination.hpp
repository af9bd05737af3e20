#pragma once

#include "lock/store.hpp"
#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/event_loop.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::sql {

class Session;

// The waiters that take nothing (dlock wait, barrier, latch) on a database store. A database
// session's lock cannot say when it was last free, and a barrier or latch must outlive the
// sessions of its parties, so:
// - wait: the gate asks the server who holds the lock (pg_locks, IS_USED_LOCK) and remembers,
//   per watcher, the sessions it first saw holding it: the lock is free, or was freed since,
//   when none holds it now, or when an exclusive holder now is not one of those (an exclusive
//   lock is granted only on a free lock).
// - barrier and latch: a state in the table dlock_gate (one row per lock name and member:
//   "barrier" its generation and parties, "latch" its count, "p:ID" each party arrived), read
//   and written in one transaction that locks the name's rows. Every row has until_ms (the
//   server's clock): an arrival lapses 2 s after its party's block ends, as on Redis; the
//   barrier's state after a day; a latch with its --expire. Each barrier step and latch set
//   deletes the rows of the table that expired (but those another session holds locked), and
//   a name's junk rows (another tenant's).
// - leader (dlock leader --watch): the database says who holds the lock and its term
//   (leadership(): 0 when free; the holder's fencing token, or another number that changes
//   with the holder); the gate opens when the term is not the one the watcher saw.
// What wakes a waiter is the database's (PostgreSQL: LISTEN/NOTIFY; MySQL: see mysql/gates):
// a release (freed()), and a candidate of dlock elect that took the lock (elected()).
class SqlGates : public lock::Coordination {
public:
  using Tell = std::function<void(lock::Outcome)>;
  ~SqlGates() override = default;

  void start_gate(const lock::LockName& name, const lock::GateRequest& request) override;
  void start_set_latch(const lock::LockName& name, std::int64_t count,
                       util::Millis expire) override;
  void start_count_down(const lock::LockName& name) override;

  // Whether a ticket is a gate's (watch, barrier, latch, leader), whose wake-ups and
  // withdrawal are this object's.
  static bool is_gate(lock::WaitMode mode) noexcept;
  // Waits up to block for what may open the ticket's gate; answers Op::wait_for_wake.
  virtual void wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                             util::Millis block) = 0;
  // A barrier party gives up: its arrival goes unless its generation tripped (gate.open).
  void withdraw(const lock::LockName& name, const lock::WaitTicket& ticket);
  // Has loop watch the gate session and the timed wake-ups.
  virtual void watch(util::EventLoop& loop) = 0;
  // Drops the gate session (which ends a transaction or a block in the server).
  virtual void abandon() noexcept = 0;
  // A lock of this prefix was let go on session (its holder's, or control's for --force):
  // tells the lock's watchers where the database can, then then() (the release's answer, so
  // that dlock does not end before they are told); by default then() alone.
  virtual void freed(const std::string& name, Session& on, std::function<void()> then)
  {
    (void)name, (void)on;
    then();
  }
  // A candidate of dlock elect (a holder with a value) took a lock of this prefix on session
  // on, its holder record and fencing token written: tells the lock's leader watchers, then
  // then() (the acquisition's answer); by default then() alone.
  virtual void elected(const std::string& name, Session& on, std::function<void()> then)
  {
    (void)name, (void)on;
    then();
  }

  // One row of dlock_gate as read back (numbers another tenant wrote wrong read as junk).
  struct Row {
    std::string member;
    std::int64_t generation = 0, parties = 0, count = -1, until = 0;
  };
  // What one query gave: the server's clock (Unix ms) and rows, or an error.
  struct Read {
    std::optional<Error> error{};
    bool no_table = false; // the table is not there (and could not be made: see error)
    bool retry = false;    // a deadlock, or a row another party held past the lock timeout
                           // (a peer stalled mid-step on a loaded machine): rolled back, the
                           // step may try again
    std::int64_t now = 0;
    std::vector<Row> rows{};
  };
  using ReadThen = std::function<void(Read)>;
  // The rows of a query that selects the server's clock, then member, generation, parties,
  // count and until (member NULL: no row, the clock only), from either database's Rows.
  template<typename Rows> static Read read_rows(const Rows& rows)
  {
    Read read;
    for (int i = 0; i < rows.count(); ++i) {
      read.now = rows.number(i, 0);
      if (rows.null(i, 1)) {
        continue;
      }
      read.rows.push_back(Row{.member = rows.text(i, 1),
                              .generation = rows.number(i, 2),
                              .parties = rows.number(i, 3),
                              .count = rows.number(i, 4),
                              .until = rows.number(i, 5)});
    }
    return read;
  }

  // A barrier attempt, decided from the name's rows (pure; unit-tested).
  struct BarrierPlan {
    lock::GateResult result;
    enum class Write { none, arrive, trip } write = Write::none;
    std::int64_t generation = 0; // arrive: the generation joined; trip: the one that tripped
  };
  static BarrierPlan plan_barrier(const std::vector<Row>& rows, const lock::GateRequest& request,
                                  std::int64_t now);
  // The latch's count at now: -1 when none is set (or it expired, or is junk).
  static std::int64_t latch_count(const std::vector<Row>& rows, std::int64_t now);
  // Whether the barrier generation joined has tripped.
  static bool tripped(const std::vector<Row>& rows, std::int64_t joined, std::int64_t now);

  // A watcher's view of the lock: the sessions that hold it (their identities, unique on the
  // server) and whether the holding is exclusive; the holder to show.
  struct Holding {
    std::vector<std::string> sessions;
    bool exclusive = true;
    lock::HolderInfo first;
  };
  // The watch rule (see the class): opens, or remembers the holding at the first sight.
  lock::GateResult look(const lock::WaitTicket& ticket, const Holding& holding, std::int64_t now_us,
                        util::Millis block);

  // A leader watcher's view of the lock: its term (0: free) and, when held, who holds it.
  struct Leadership {
    std::int64_t term = 0;
    lock::HolderInfo holder; // with its value, when a dlock holder recorded one
    std::int64_t holders = 0;
  };
  // The leader rule (pure; unit-tested): open when the term is not the one seen (since),
  // with the term and the holder either way; else block up to block.
  static lock::GateResult look_leader(const lock::WaitTicket& ticket, const Leadership& leadership,
                                      util::Millis block);

protected:
  // answer: where outcomes go (the store's queue); server: "PostgreSQL" or "MySQL".
  SqlGates(Tell answer, std::string server, std::string prefix);

  // The SQL of one database.
  struct Dialect {
    std::string table;       // dlock_gate, qualified as the database needs
    std::string now_ms;      // the server's clock in Unix ms, as an SQL expression
    std::string insert_new;  // "INSERT INTO t" + ... that ignores a duplicate key: prefix
    std::string ignore_tail; // ... and its tail (" ON CONFLICT DO NOTHING" or "")
    // The upsert tail that replaces generation, parties, latch_count and until_ms.
    std::string upsert_tail;
    // FROM ... WHERE of a delete of the rows of x, which selects the gate_key and member of
    // some expired rows FOR UPDATE SKIP LOCKED: a row another session holds is left for later.
    std::string delete_expired_from;
  };
  virtual const Dialect& dialect() = 0;
  // The name's key in dlock_gate, as an SQL literal.
  virtual std::string key_of(const lock::LockName& name) = 0;
  // Runs the statements in order on the gate session in a transaction (BEGIN first unless
  // one is open; ROLLBACK on an error, which ends it), after the table is there; then with the
  // server's clock and the rows of the statement marked by read (its index; -1: none).
  // commit: the transaction ends with them (else it stays open for the next call); notify:
  // the name's waiters are told at commit.
  virtual void transact(const lock::LockName& name, std::vector<std::string> statements, int read,
                        bool commit, bool notify, ReadThen then) = 0;
  // Reads with one statement, outside any transaction (the table made first if need be).
  virtual void select(const lock::LockName& name, std::string statement, ReadThen then) = 0;
  // Who holds the lock name now, with the server's clock in µs (watch).
  using HoldingThen = std::function<void(std::optional<Error>, Holding, std::int64_t)>;
  virtual void holding(const lock::LockName& name, HoldingThen then) = 0;
  // Who holds the lock name now and its term (leader), with the watcher registered for the
  // wake-ups of freed() and elected() before it looks; by default refused (a database that
  // has no leader gate yet).
  using LeadershipThen = std::function<void(std::optional<Error>, Leadership)>;
  virtual void leadership(const lock::LockName& name, LeadershipThen then);

  // The columns every read selects: now, member, generation, parties, count, until.
  std::string columns();
  // An error Read turned into the refusal of op (no table: one line naming it).
  Error refused(const Read& read, const char* what) const;

  Tell m_answer;
  std::string m_server;
  std::string m_prefix;

private:
  // How many times a step is tried again after a Read with retry (a deadlock, a lock timeout).
  static constexpr int most_attempts = 5;
  // attempt: how many times it was tried again after a deadlock between parties.
  void barrier_step(const lock::LockName& name, const lock::GateRequest& request, int attempt = 0);
  // A latch's count-down, which many parties (CI jobs fanning in) may take at once.
  void count_down_step(const lock::LockName& name, int attempt);
  void latch_step(const lock::LockName& name, const lock::GateRequest& request);
  // The sweep of a name's rows in its transactions: the expired and the junk ones (another
  // tenant's), arrivals of another generation.
  std::string sweep(const std::string& key, std::int64_t generation);
  // Then, in a transaction of its own (best effort: its error is no failure of op), the rows
  // of every name that expired, but those another session holds locked (a tenant's lock on
  // one row must not fail every latch and barrier); then then().
  void sweep_all(const lock::LockName& name, std::function<void()> then);

  // watch: the holding each watcher first saw.
  struct Seen {
    std::set<std::string> sessions;
    bool exclusive = true;
  };
  std::map<std::string, Seen> m_seen; // by waiter id
};

// A party's member in dlock_gate: "p:" + its id, hex or alphanumerics only.
std::string party_member(std::string_view waiter_id);

} // namespace dlock::sql
