#include "stores/mysql/mysql_store.hpp"

#include "stores/mysql/gates.hpp"

#include "util/clock.hpp"
#include "util/log.hpp"

#include <mysqld_error.h>

#include <fnmatch.h>

#include <algorithm>

namespace dlock::mysql {

using lock::Outcome;
using util::Millis;

namespace {

// MySQL's ER_QUERY_TIMEOUT (max_execution_time), which MariaDB's headers do not name.
constexpr unsigned mysql_query_timeout = 3024;

// How often, and how many times, release --force looks whether the killed session let go.
constexpr const char* freed_pause = "DO SLEEP(0.01)";
constexpr int freed_tries = 300;
// Slots tried in one statement (a CASE that stops at the first GET_LOCK it gets).
constexpr int slots_per_try = 64;
// A semaphore waiter blocks on one slot in the server, whichever of them frees first: it
// looks at the others again this often (the slot it blocks on wakes it at once).
constexpr Millis slot_block{2'000};
// The slots status looks at (GET_LOCK names cannot be listed): the first ones, which holders
// fill first.
constexpr int status_slots = 64;

bool is_semaphore(const lock::LockKind& kind) { return kind.mode == lock::LockKind::Mode::limit; }
bool is_shared(const lock::LockKind& kind) { return kind.mode == lock::LockKind::Mode::shared; }

// "SELECT IS_USED_LOCK(reader 0), …": the connections that hold the reader names of prefixed.
std::string readers_sql(const std::string& prefixed)
{
  std::string sql = "SELECT ";
  for (int i = 0; i < reader_slots; ++i) {
    // named: the answer carries each column's name, else the whole expression
    sql += fmt::format("{}IS_USED_LOCK({}) r{}", i == 0 ? "" : ", ",
                       sql_bytes(reader_lock_name(prefixed, i)), i);
  }
  return sql;
}

// "SELECT CASE WHEN GET_LOCK(first free name) … THEN i … ELSE -1 END" over names from..to.
template<class NameOf> std::string first_free_sql(int from, int to, NameOf name_of)
{
  std::string sql = "SELECT CASE";
  for (int i = from; i < to; ++i) {
    sql += fmt::format(" WHEN GET_LOCK({}, 0) = 1 THEN {}", sql_bytes(name_of(i)), i);
  }
  return sql + " ELSE -1 END";
}

const char* now_ms_sql = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

// dlock_fence: one row per lock name dlock took, with its last fencing token and who took it.
const char* create_fence_sql =
  "CREATE TABLE IF NOT EXISTS dlock_fence ("
  "lock_name VARBINARY(64) NOT NULL PRIMARY KEY, " // GET_LOCK's name (names.hpp)
  "name VARBINARY(3072) NOT NULL, "                // prefix + lock name
  "fence BIGINT NOT NULL, "
  "acquired_ms BIGINT NOT NULL, "   // Unix time in ms, the server's clock
  "connection_id BIGINT NOT NULL, " // the holding session
  "holder_user VARBINARY(255) NOT NULL, holder_host VARBINARY(255) NOT NULL, "
  "holder_pid BIGINT NOT NULL, command VARBINARY(1024) NOT NULL)";

// dlock_queue: the --fair tickets, in the order of the counter; waiter is the GET_LOCK name
// that the waiter's session holds while it waits (names.hpp), which makes the row live.
const char* create_queue_sql = "CREATE TABLE IF NOT EXISTS dlock_queue ("
                               "ticket BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
                               "lock_name VARBINARY(64) NOT NULL, "
                               "waiter VARBINARY(64) NOT NULL, KEY (lock_name, ticket))";

// dlock_policy: the side record of each lock (sql/policy.hpp).
const char* create_policy_sql =
  "CREATE TABLE IF NOT EXISTS dlock_policy ("
  "lock_name VARBINARY(64) NOT NULL PRIMARY KEY, " // GET_LOCK's name (names.hpp)
  "name VARBINARY(3072) NOT NULL DEFAULT '', "     // prefix + lock name
  "token_fp VARBINARY(64) NOT NULL, session_id BIGINT NOT NULL, holder BLOB NOT NULL, "
  "hold_until BIGINT NOT NULL, released TINYINT NOT NULL, delay_ms BIGINT NOT NULL, "
  "ended_at BIGINT NOT NULL, replace_by BLOB NOT NULL, "
  "newest_waiter VARBINARY(64) NOT NULL DEFAULT '', newest VARBINARY(4096) NOT NULL DEFAULT '', "
  "newest_until BIGINT NOT NULL DEFAULT 0)";

// dlock_history (sql/history.hpp): event as dlock writes it, at most max_event_bytes.
const char* create_history_sql = "CREATE TABLE IF NOT EXISTS dlock_history ("
                                 "id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
                                 "lock_key VARBINARY(64) NOT NULL, " // GET_LOCK's name (names.hpp)
                                 "name VARBINARY(3072) NOT NULL, "   // prefix + lock name
                                 "at_ms BIGINT NOT NULL, event VARBINARY(4096) NOT NULL, "
                                 "KEY (lock_key, id), KEY (at_ms))";

// sql::policy_columns in MySQL's words (read back with sql::policy_row).
std::string policy_columns()
{
  return sql::policy_columns([](const char* column, std::size_t bytes) {
    return fmt::format("LEFT(CAST(p.{} AS BINARY), {})", column, bytes);
  });
}

// Errors that say dlock_fence cannot be used: no right to create or write it, a read-only
// server, or no such table after all.
bool fence_unavailable(unsigned errnum)
{
  switch (errnum) {
  case ER_TABLEACCESS_DENIED_ERROR:
  case ER_DBACCESS_DENIED_ERROR:
  case ER_SPECIFIC_ACCESS_DENIED_ERROR:
  case ER_OPTION_PREVENTS_STATEMENT:
  case ER_OPEN_AS_READONLY:
  case ER_READ_ONLY_MODE:
  case ER_READ_ONLY_TRANSACTION:
  case ER_NO_SUCH_TABLE:
  case ER_NO_DB_ERROR:
    return true;
  default:
    return false;
  }
}

// Clears the command of the lock's dlock_fence row if the session connection_sql (an SQL
// expression) wrote it: what a holder ran is not kept after it let go (the row stays: its
// fencing token must).
std::string forget_command_sql(const std::string& server_name, const std::string& connection_sql)
{
  return "UPDATE dlock_fence SET command = '' WHERE lock_name = " + sql_bytes(server_name)
         + " AND connection_id = " + connection_sql;
}

// The holder of a lock, its fencing row and the server's clock, in one row:
// id, USER, HOST, now, fence, acquired_ms, connection_id, holder_user, holder_host,
// holder_pid, command (the last six NULL without dlock_fence).
std::string holder_sql(const std::string& server_name, bool with_fence)
{
  std::string name = sql_bytes(server_name);
  std::string sql = std::string("SELECT u.id, p.USER, p.HOST, ") + now_ms_sql + ", ";
  if (with_fence) {
    sql += fence_columns();
  } else {
    sql += "NULL, NULL, NULL, NULL, NULL, NULL, NULL ";
  }
  sql += "FROM (SELECT IS_USED_LOCK(" + name
         + ") AS id) u "
           "LEFT JOIN information_schema.PROCESSLIST p ON p.ID = u.id";
  if (with_fence) {
    sql += " LEFT JOIN dlock_fence f ON f.lock_name = " + name;
  }
  return sql;
}

// The fencing counter of a row: 0 without one (no dlock_fence), nothing when another tenant
// wrote there what dlock does not.
std::optional<std::int64_t> last_fence(const Rows& rows, int row, int column)
{
  return rows.null(row, column) ? 0 : lock::parse_fence(rows.text(row, column));
}

} // namespace

MysqlStore::MysqlStore(ConnectParams params, std::string prefix)
  : SqlStore("MySQL", params.shown, std::move(prefix), "wait_timeout"), m_params(std::move(params))
{
  m_gates = std::make_unique<MysqlGates>(m_params, m_prefix,
                                         [this](Outcome outcome) { answer(std::move(outcome)); });
}

std::unique_ptr<sql::Session> MysqlStore::open_session(const Named& n)
{
  m_held.erase(n.prefixed); // a new session holds nothing yet
  return std::make_unique<Session>(m_params);
}

std::unique_ptr<sql::Session> MysqlStore::open_control()
{
  return std::make_unique<Session>(m_params);
}

std::string MysqlStore::lock_bytes(const std::string& name)
{
  return sql_bytes(server_lock_name(m_named.at(name).prefixed));
}

void MysqlStore::read_limit(const std::string& name, const lock::AcquireRequest& request)
{
  // The session is the lease: an idle one must outlive any TTL, so dlock raises its
  // wait_timeout (the server keeps the largest it allows), then reads what it got: one round
  // trip (a failed SET leaves the setting as it was, which the SHOW reads).
  session(name).query(fmt::format("SET SESSION wait_timeout = {}", wanted_wait_timeout_s), nullptr);
  session(name).query(
    "SHOW SESSION VARIABLES WHERE Variable_name IN ('wait_timeout', 'tcp_keepalive_time', "
    "'tcp_keepalive_interval', 'tcp_keepalive_probes')",
    [this, name, request](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      SessionSettings settings;
      settings.over_tcp = session(name).over_tcp();
      for (int i = 0; i < a.rows.count(); ++i) {
        settings.take(a.rows.text(i, 0), a.rows.number(i, 1));
      }
      limit_found(name, request, session_limit(settings));
    });
}

void MysqlStore::try_lock(const std::string& name, const lock::AcquireRequest& request)
{
  if (is_semaphore(request.kind)) {
    try_slots(name, request, 0);
    return;
  }
  if (is_shared(request.kind)) {
    try_shared(name, request);
    return;
  }
  if (held_of(name).writer) { // a waiting exclusive holder: the readers it waits for
    check_readers(name, request, false);
    return;
  }
  if (request.ticket.mode == lock::WaitMode::fair && !held_of(name).ticket) {
    enqueue(name, request, false);
    return;
  }
  if (request.ticket.mode == lock::WaitMode::fair && !held_of(name).first) {
    try_fair(name, request);
    return;
  }
  held_of(name).first = false;
  // the writer's name, and then (in the same round trip: read for nothing if it is not got)
  // the names of the shared and semaphore holders it must wait for
  // and the side record, which the next step reads right after the lock is taken
  std::vector<std::string> statements{"SELECT GET_LOCK(" + lock_bytes(name) + ", 0)",
                                      readers_and_slots_sql(name)};
  if (std::optional<std::string> policy = prefetch_policy_sql(name)) {
    statements.push_back(std::move(*policy));
  }
  session(name).query_all(
    std::move(statements),
    [this, name, request](std::vector<Answer>& all) {
      Answer& a = all.at(0);
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      if (a.rows.count() != 1 || a.rows.null(0, 0)) {
        answer(Op::acquire,
               Error(ExitCode::internal, "MySQL at {}: GET_LOCK answered NULL", m_params.shown));
        return;
      }
      if (a.rows.number(0, 0) != 1) {
        tried(name, request, false);
        return;
      }
      held_of(name).writer = true;
      prefetched_policy(name, true, all, 2);
      readers_found(name, request, false, all.at(1));
    },
    true);
}

void MysqlStore::enqueue(const std::string& name, const lock::AcquireRequest& request, bool created)
{
  // the waiter's name first, then its row: the row is never seen without its name held
  std::string waiter = queue_lock_name(request.token);
  session(name).query(
    fmt::format("SELECT GET_LOCK({}, 0)", sql_bytes(waiter)),
    [this, name, request, waiter, created](Answer& got) {
      if (got.error) {
        answer(Op::acquire, *got.error);
        return;
      }
      session(name).query(
        fmt::format("INSERT INTO dlock_queue (lock_name, waiter) VALUES ({}, {})", lock_bytes(name),
                    sql_bytes(waiter)),
        [this, name, request, created](Answer& a) {
          if (a.error && a.errnum == ER_NO_SUCH_TABLE && !created) {
            session(name).query(
              create_queue_sql,
              [this, name, request](Answer& made) {
                if (made.error && made.errnum != ER_TABLE_EXISTS_ERROR) {
                  answer(Op::acquire,
                         Error(made.error->code(),
                               "--fair (and elect) on MySQL needs the table dlock_queue, which "
                               "dlock cannot use: {}",
                               made.error->what()));
                  return;
                }
                enqueue(name, request, true);
              },
              true);
            return;
          }
          if (a.error) {
            answer(Op::acquire,
                   Error(a.error->code(),
                         "--fair (and elect) on MySQL needs the table dlock_queue, which dlock "
                         "cannot use: {}",
                         a.error->what()));
            return;
          }
          session(name).query(
            "SELECT LAST_INSERT_ID()",
            [this, name, request](Answer& id) {
              if (id.error || id.rows.count() != 1) {
                answer(Op::acquire,
                       id.error ? *id.error
                                : Error(ExitCode::internal, "MySQL: no ticket from dlock_queue"));
                return;
              }
              held_of(name).ticket = id.rows.number(0, 0);
              try_fair(name, request);
            },
            true);
        },
        true);
    },
    true);
}

void MysqlStore::try_fair(const std::string& name, const lock::AcquireRequest& request)
{
  // the rows of waiters whose session ended go (every lock's), then the ticket ahead
  session(name).query(
    "DELETE FROM dlock_queue WHERE IS_USED_LOCK(waiter) IS NULL",
    [this, name, request](Answer& purged) {
      if (purged.error) {
        answer(Op::acquire, *purged.error);
        return;
      }
      session(name).query(
        fmt::format("SELECT LEFT(waiter, 64) FROM dlock_queue WHERE lock_name = {} AND ticket < "
                    "{} AND IS_USED_LOCK(waiter) IS NOT NULL ORDER BY ticket DESC LIMIT 1",
                    lock_bytes(name), *held_of(name).ticket),
        [this, name, request](Answer& a) {
          if (a.error) {
            answer(Op::acquire, *a.error);
            return;
          }
          Held& held = held_of(name);
          held.ahead.reset();
          if (a.rows.count() == 1) {
            held.ahead = a.rows.text(0, 0);
          } else { // the first: the lock itself
            held.first = true;
            try_lock(name, request);
            return;
          }
          session(name).query(
            "SELECT IS_USED_LOCK(" + lock_bytes(name) + ") IS NULL",
            [this, name, request](Answer& free) {
              if (free.error) {
                answer(Op::acquire, *free.error);
                return;
              }
              if (free.rows.count() == 1 && free.rows.number(0, 0) == 1) {
                Outcome outcome = Outcome::of(Op::acquire);
                outcome.acquire.lease = lock::AcquireResult::Lease::fair_queue;
                Millis cap =
                  request.ticket.max_block > Millis(0) ? request.ticket.max_block : Millis(30'000);
                outcome.acquire.block = std::min(cap, Millis(30'000));
                answer(std::move(outcome));
                return;
              }
              report_holder(name, request, m_fencing);
            },
            true);
        },
        true);
    },
    true);
}

std::string MysqlStore::readers_and_slots_sql(const std::string& name)
{
  std::string sql = readers_sql(m_named.at(name).prefixed);
  for (int i = 0; i < status_slots; ++i) {
    sql += fmt::format(", IS_USED_LOCK({}) s{}",
                       sql_bytes(slot_lock_name(m_named.at(name).prefixed, i)), i);
  }
  return sql;
}

void MysqlStore::check_readers(const std::string& name, const lock::AcquireRequest& request,
                               bool waited)
{
  session(name).query(
    readers_and_slots_sql(name),
    [this, name, request, waited](Answer& a) { readers_found(name, request, waited, a); }, true);
}

void MysqlStore::readers_found(const std::string& name, const lock::AcquireRequest& request,
                               bool waited, Answer& a)
{
  // the writer's name is this session's: no new shared holder (or semaphore holder) comes;
  // those in stay until they let go, and the first of them is waited for. A semaphore's
  // holders are seen in its first status_slots slots, which its holders fill first.
  {
    {
      if (a.error) {
        if (waited) {
          woken(a.error);
        } else {
          answer(Op::acquire, *a.error);
        }
        return;
      }
      Held& held = held_of(name);
      std::vector<std::int64_t> in;
      held.wait_on.reset();
      const std::string& prefixed = m_named.at(name).prefixed;
      for (int i = 0; a.rows.count() == 1 && i < reader_slots + status_slots; ++i) {
        if (!a.rows.null(0, i)) {
          in.push_back(a.rows.number(0, i));
          if (!held.wait_on) {
            held.wait_on = i < reader_slots ? reader_lock_name(prefixed, i)
                                            : slot_lock_name(prefixed, i - reader_slots);
          }
        }
      }
      if (in.empty()) {
        held.writer = false; // it is the lock now
        if (waited) {
          granted(name);
          after_taken(name, [this] { woken(); });
        } else {
          tried(name, request, true);
        }
        return;
      }
      held.policy.reset(); // not taken: read again once it is
      if (waited) {
        woken();
        return;
      }
      lock::HolderInfo first = holder_of_session(
        SessionRow{.connection = in.front(), .user = {}, .client_host = {}, .written = {}});
      holders_found(name, request, &first, std::int64_t(in.size()));
    }
  }
}

void MysqlStore::try_shared(const std::string& name, const lock::AcquireRequest& request)
{
  // the writer's name, for a moment: held by an exclusive holder or a waiting one, no shared
  // holder comes in (writer first)
  session(name).query(
    "SELECT GET_LOCK(" + lock_bytes(name) + ", 0)",
    [this, name, request](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      if (a.rows.count() == 1 && a.rows.number(0, 0) == 1) {
        take_reader(name, [this, name, request](const std::optional<Error>& error, bool taken) {
          if (error) {
            answer(Op::acquire, *error);
            return;
          }
          tried(name, request, taken);
        });
        return;
      }
      held_of(name).wait_on.reset(); // wait on the writer's name
      report_writer(name, request);
    },
    true);
}

void MysqlStore::take_reader(const std::string& name,
                             std::function<void(const std::optional<Error>&, bool)> then)
{
  // none while a semaphore's holder is in (its first status_slots slots): -2 - that slot
  std::string prefixed = m_named.at(name).prefixed;
  std::string sql = "SELECT CASE";
  for (int i = 0; i < status_slots; ++i) {
    sql += fmt::format(" WHEN IS_USED_LOCK({}) IS NOT NULL THEN {}",
                       sql_bytes(slot_lock_name(prefixed, i)), -2 - i);
  }
  sql += first_free_sql(0, reader_slots, [&prefixed](int i) {
           return reader_lock_name(prefixed, i);
         }).substr(std::string_view("SELECT CASE").size());
  session(name).query(
    sql,
    [this, name, prefixed, then](Answer& a) {
      std::int64_t reader = !a.error && a.rows.count() == 1 ? a.rows.number(0, 0) : -1;
      Held& held = held_of(name);
      if (reader >= 0) {
        held.reader = int(reader);
      } else if (reader <= -2) { // a semaphore's: wait for that slot's holder
        held.wait_on = slot_lock_name(prefixed, int(-2 - reader));
      } else { // all taken: the next wait blocks on one of them
        held.wait_on = reader_lock_name(prefixed, held.turn++ % reader_slots);
      }
      std::optional<Error> error = a.error;
      session(name).query(
        "DO RELEASE_LOCK(" + lock_bytes(name) + ")",
        [then, error, reader](Answer& released) {
          then(error ? error : released.error, reader >= 0);
        },
        true);
    },
    true);
}

void MysqlStore::report_writer(const std::string& name, const lock::AcquireRequest& request)
{
  // the writer's name is held: by an exclusive holder, or by one waiting for the shared
  // holders still in (which this one does not join)
  session(name).query(
    readers_sql(m_named.at(name).prefixed),
    [this, name, request](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      std::int64_t in = 0;
      for (int i = 0; a.rows.count() == 1 && i < reader_slots; ++i) {
        in += a.rows.null(0, i) ? 0 : 1;
      }
      if (in == 0) {
        report_holder(name, request, m_fencing);
        return;
      }
      Outcome outcome = Outcome::of(Op::acquire);
      outcome.acquire.lease = lock::AcquireResult::Lease::writer_first;
      outcome.acquire.holders = in;
      Millis cap = request.ticket.max_block > Millis(0) ? request.ticket.max_block : slot_block;
      outcome.acquire.block = std::min(cap, slot_block);
      answer(std::move(outcome));
    },
    true);
}

void MysqlStore::try_slots(const std::string& name, const lock::AcquireRequest& request, int first)
{
  const std::string& prefixed = m_named.at(name).prefixed;
  int last = std::min(request.kind.limit, first + slots_per_try);
  std::string sql =
    first_free_sql(first, last, [&prefixed](int i) { return slot_lock_name(prefixed, i); });
  session(name).query(
    sql,
    [this, name, request, last](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      std::int64_t slot = a.rows.count() == 1 ? a.rows.number(0, 0) : -1;
      if (slot >= 0) {
        slot_taken(name, request, int(slot));
      } else if (last < request.kind.limit) {
        try_slots(name, request, last);
      } else {
        tried(name, request, false);
      }
    },
    true);
}

void MysqlStore::slot_taken(const std::string& name, const lock::AcquireRequest& request, int slot)
{
  held_of(name).slot = slot;
  // taken first, then looked at: the exclusive lock of the name is another kind
  session(name).query(
    readers_sql(m_named.at(name).prefixed) + ", IS_USED_LOCK(" + lock_bytes(name) + ")",
    [this, name, request](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      int readers = 0;
      for (int i = 0; a.rows.count() == 1 && i < reader_slots; ++i) {
        readers += a.rows.null(0, i) ? 0 : 1;
      }
      if (a.rows.count() == 1 && (readers > 0 || !a.rows.null(0, reader_slots))) {
        m_named.at(name).held = false;
        let_go(name);
        Outcome outcome = Outcome::of(Op::acquire);
        outcome.acquire.kind_in_use =
          readers > 0 ? lock::LockKind::shared() : lock::LockKind::exclusive();
        answer(std::move(outcome));
        return;
      }
      tried(name, request, true);
    },
    true);
}

void MysqlStore::after_taken(const std::string& name, std::function<void()> then)
{
  Held& held = held_of(name);
  if (held.ticket) { // out of the queue: the ticket, and the waiter's name
    std::int64_t ticket = *held.ticket;
    held.ticket.reset();
    held.ahead.reset();
    held.first = false;
    session(name).query(fmt::format("DELETE FROM dlock_queue WHERE ticket = {}", ticket), nullptr,
                        true);
    session(name).query(
      "DO RELEASE_LOCK(" + sql_bytes(queue_lock_name(m_named.at(name).token)) + ")", nullptr);
    after_taken(name, then);
    return;
  }
  // Without it another process given the token could not find this session; the lock
  // itself is held either way. Nobody waits for its answer: it goes in one round trip with
  // the next step (the acquisition's answer comes after it), before it.
  session(name).later("DO GET_LOCK(" + sql_bytes(token_lock_name(m_named.at(name).token)) + ", 0)",
                      true);
  then();
}

void MysqlStore::take_fence(const std::string& name, bool created_table)
{
  const Named& n = m_named.at(name);
  auto unavailable = [this, name](const Answer& a) { no_fencing(name, a.error->what()); };
  // LAST_INSERT_ID(expr) hands the new token to this session's LAST_INSERT_ID(), whether the
  // row is new (1) or counted up.
  std::string sql = fmt::format(
    "INSERT INTO dlock_fence (lock_name, name, fence, acquired_ms, connection_id, holder_user, "
    "holder_host, holder_pid, command) VALUES ({}, {}, LAST_INSERT_ID(1), {}, CONNECTION_ID(), "
    "{}, {}, {}, {}) ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1), "
    "name = VALUES(name), acquired_ms = VALUES(acquired_ms), "
    "connection_id = VALUES(connection_id), holder_user = VALUES(holder_user), "
    "holder_host = VALUES(holder_host), holder_pid = VALUES(holder_pid), "
    "command = VALUES(command)",
    sql_bytes(server_lock_name(n.prefixed)), sql_bytes(n.prefixed), now_ms_sql,
    sql_bytes(n.holder.user), sql_bytes(n.holder.host), n.holder.pid, sql_bytes(n.holder.command));
  // COMMIT: of the transaction in which the holder's record was written (write_policy), if
  // any; the token is answered once it is kept.
  session(name).query_all(
    {sql, "SELECT LAST_INSERT_ID()", "COMMIT"},
    [this, name, created_table, unavailable](std::vector<Answer>& all) {
      Answer& a = all.at(0);
      if (a.error || all.at(1).error || all.at(2).error) { // the transaction ends first
        session(name).query("COMMIT", nullptr, true);
      }
      if (a.error && a.errnum == ER_NO_SUCH_TABLE && !created_table) { // no table yet: make it
        session(name).query(
          create_fence_sql,
          [this, name, unavailable](Answer& created) {
            if (created.error && created.errnum != ER_TABLE_EXISTS_ERROR
                && fence_unavailable(created.errnum)) {
              unavailable(created);
              return;
            }
            if (created.error && created.errnum != ER_TABLE_EXISTS_ERROR) {
              answer(Op::acquire, *created.error);
              return;
            }
            fence(name, true);
          },
          true);
        return;
      }
      if (a.error && fence_unavailable(a.errnum)) {
        unavailable(a);
        return;
      }
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      Answer& id = all.at(1);
      if (id.error || all.at(2).error) {
        answer(Op::acquire, id.error ? *id.error : *all.at(2).error);
        return;
      }
      // a candidate's leader watchers are told: its rows are all written
      fenced(name, id.rows.count() == 1 ? id.rows.number(0, 0) : 0);
    },
    true);
}

void MysqlStore::report_holder(const std::string& name, const lock::AcquireRequest& request)
{
  if (is_semaphore(request.kind)) { // every slot is taken
    holders_found(name, request, nullptr, request.kind.limit);
    return;
  }
  report_holder(name, request, m_fencing);
}

void MysqlStore::report_holder(const std::string& name, const lock::AcquireRequest& request,
                               bool with_fence)
{
  session(name).query(
    holder_sql(server_lock_name(m_named.at(name).prefixed), with_fence),
    [this, name, request, with_fence](Answer& a) {
      if (a.error && with_fence && fence_unavailable(a.errnum)) {
        report_holder(name, request, false);
        return;
      }
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      if (a.rows.count() == 1 && !a.rows.null(0, 0)) {
        lock::HolderInfo holder = read_holder(a.rows, 0, 0, 4);
        holders_found(name, request, &holder, 1, a.rows.number(0, 0));
      } else {
        holders_found(name, request, nullptr, 0);
      }
    },
    true);
}

void MysqlStore::wait_in_server(const std::string& name, Millis block)
{
  // Blocks in the server until the holder lets go (it is this session's then) or the
  // time-out ends the wait (0); the timeout takes fractions of a second on MariaDB, whole
  // seconds on MySQL, which rounds it.
  const Named& n = m_named.at(name);
  Held& held = held_of(name);
  std::string lock = lock_bytes(name);
  std::optional<int> slot;
  // a name waited for and given back at once: a shared holder that a waiting writer waits
  // for, or a full set of shared holders
  std::optional<std::string> other = held.wait_on;
  if (held.ahead) { // --fair, behind another waiter: until it leaves the queue
    other = held.ahead;
  }
  if (is_semaphore(n.kind)) {
    // one slot, a different one each time: its holder's end hands it over at once
    slot = held.turn++ % n.kind.limit;
    lock = sql_bytes(slot_lock_name(n.prefixed, *slot));
    block = std::min(block, slot_block);
  } else if (other) {
    lock = sql_bytes(*other);
    block = std::min(block, slot_block);
  }
  double seconds = double(std::max<std::int64_t>(1, block.count())) / 1000.0;
  std::vector<std::string> statements{fmt::format("SELECT GET_LOCK({}, {:.3f})", lock, seconds)};
  bool writer = !slot && !other && !is_shared(n.kind);
  if (writer) { // the writer's name: who it waits for then, and the side record
    statements.push_back(readers_and_slots_sql(name));
    if (std::optional<std::string> policy = prefetch_policy_sql(name)) {
      statements.push_back(std::move(*policy));
    }
  }
  session(name).query_all(
    std::move(statements), [this, name, slot, other, writer](std::vector<Answer>& all) {
      Answer& a = all.at(0);
      bool got = !a.error && a.rows.count() == 1 && a.rows.number(0, 0) == 1;
      const Named& waiting = m_named.at(name);
      if (got && other) {
        held_of(name).wait_on.reset();
        held_of(name).ahead.reset();
        session(name).query(
          "DO RELEASE_LOCK(" + sql_bytes(*other) + ")", [this](Answer&) { woken(); }, true);
        return;
      }
      if (got && is_shared(waiting.kind)) { // the writer's name: now a reader's
        take_reader(name, [this, name](const std::optional<Error>& error, bool taken) {
          if (!error && taken) {
            granted(name);
            after_taken(name, [this] { woken(); });
            return;
          }
          woken(error);
        });
        return;
      }
      if (got && writer) { // the writer's name: the lock, once no shared holder is in
        held_of(name).writer = true;
        prefetched_policy(name, true, all, 2);
        readers_found(name, lock::AcquireRequest{}, true, all.at(1));
        return;
      }
      if (got && !slot) {
        held_of(name).writer = true;
        check_readers(name, lock::AcquireRequest{}, true);
        return;
      }
      if (got) {
        held_of(name).slot = slot;
        granted(name);
        after_taken(name, [this] { woken(); });
        return;
      }
      // A server's statement time-out (MariaDB's max_statement_time, MySQL's
      // max_execution_time: 3024) or KILL QUERY ended the wait early: ask again.
      if (a.error && a.errnum != ER_QUERY_INTERRUPTED && a.errnum != ER_STATEMENT_TIMEOUT
          && a.errnum != mysql_query_timeout) {
        woken(a.error);
        return;
      }
      woken();
    });
}

std::string MysqlStore::held_lock(const std::string& name)
{
  const Named& n = m_named.at(name);
  const Held& held = held_of(name);
  if (is_semaphore(n.kind)) {
    return held.slot ? sql_bytes(slot_lock_name(n.prefixed, *held.slot)) : "NULL";
  }
  if (is_shared(n.kind)) {
    return held.reader ? sql_bytes(reader_lock_name(n.prefixed, *held.reader)) : "NULL";
  }
  return lock_bytes(name);
}

void MysqlStore::confirm_held(const std::string& name)
{
  std::string lock = held_lock(name);
  session(name).query(
    "SELECT IS_USED_LOCK(" + lock + ") <=> CONNECTION_ID()", [this, name](Answer& a) {
      held_confirmed(name, a.error, a.rows.count() == 1 && a.rows.number(0, 0) == 1);
    });
}

void MysqlStore::confirm_other(const lock::LockName& name, const std::string& token)
{
  // The holding session also holds the token's lock (names.hpp): the lock's name, or a
  // reader name or one of the first slots of a shared or semaphore holder.
  std::string prefixed = m_prefix + name.str();
  std::string held = "IS_USED_LOCK(" + sql_bytes(server_lock_name(prefixed)) + ")";
  for (int i = 0; i < status_slots; ++i) {
    held += ", IS_USED_LOCK(" + sql_bytes(reader_lock_name(prefixed, i)) + "), IS_USED_LOCK("
            + sql_bytes(slot_lock_name(prefixed, i)) + ")";
  }
  std::string mine = "IS_USED_LOCK(" + sql_bytes(token_lock_name(token)) + ")";
  control().query("SELECT " + mine + " IS NOT NULL AND " + mine + " IN (" + held + ")",
                  [this](Answer& a) {
                    other_confirmed(a.error, a.rows.count() == 1 && a.rows.number(0, 0) == 1);
                  });
}

void MysqlStore::unlock(const std::string& name)
{
  std::string server_name = server_lock_name(m_named.at(name).prefixed);
  if (m_fencing && !held_of(name).forgotten) {
    // The row outlives the lock (its fencing token must): the command line goes first,
    // while the lock is still this session's. Best effort: a failure does not keep the lock.
    session(name).query(forget_command_sql(server_name, "CONNECTION_ID()"), nullptr);
  }
  std::string lock = held_lock(name);
  std::string sweep = std::move(held_of(name).sweep);
  std::vector<std::string> after = std::move(held_of(name).after_release);
  held_of(name) = Held{};
  // the sleeps of the lock's watchers, which the release ends (released tells them), are
  // looked up in the same round trip, right after it, and the sweep (write_policy) goes last
  auto& gates = static_cast<MysqlGates&>(*m_gates);
  std::vector<std::string> statements{"SELECT RELEASE_LOCK(" + lock + ")", gates.freed_sql(name)};
  statements.insert(statements.end(), after.begin(), after.end());
  if (!sweep.empty()) {
    statements.push_back(std::move(sweep));
  }
  session(name).query_all(std::move(statements), [this, name, &gates](std::vector<Answer>& all) {
    Answer& a = all.at(0);
    Named& n = m_named.at(name);
    // Ending the session lets go of the token's lock too, and of any
    // count GET_LOCK kept.
    n.closing = true;
    bool let_go = !a.error && a.rows.count() == 1 && a.rows.number(0, 0) == 1;
    if (let_go && !all.at(1).error) {
      gates.sleepers_found(name, session(name), all.at(1));
    }
    released(name, a.error, n.session->broken(), let_go);
  });
}

void MysqlStore::end_holder(const lock::LockName& name, const std::string& token)
{
  std::string lock = server_lock_name(m_prefix + name.str());
  std::string sql = "SELECT IS_USED_LOCK(" + sql_bytes(lock) + "), "
                    + (token.empty() ? std::string("IS_USED_LOCK(") + sql_bytes(lock) + ")"
                                     : "IS_USED_LOCK(" + sql_bytes(token_lock_name(token)) + ")");
  control().query(sql, [this, name, token, lock](Answer& a) {
    if (a.error) {
      answer(Op::release, *a.error);
      return;
    }
    if (token.empty() && a.rows.count() == 1 && a.rows.null(0, 0)) {
      end_slot_holders(name); // held as shared or a semaphore, if at all
      return;
    }
    if (a.rows.count() != 1 || a.rows.null(0, 0) || a.rows.text(0, 0) != a.rows.text(0, 1)) {
      holder_ended(name, token, Outcome::of(Op::release)); // not held (by it)
      return;
    }
    kill_holder(name, token, lock, a.rows.number(0, 0));
  });
}

void MysqlStore::end_slot_holders(const lock::LockName& name)
{
  std::string prefixed = m_prefix + name.str();
  std::string sql = readers_sql(prefixed);
  for (int i = 0; i < status_slots; ++i) {
    sql += ", IS_USED_LOCK(" + sql_bytes(slot_lock_name(prefixed, i)) + ")";
  }
  control().query(sql, [this, name](Answer& a) {
    if (a.error) {
      answer(Op::release, *a.error);
      return;
    }
    std::vector<std::int64_t> holders;
    for (int i = 0; a.rows.count() == 1 && i < reader_slots + status_slots; ++i) {
      if (!a.rows.null(0, i)) {
        holders.push_back(a.rows.number(0, i));
      }
    }
    if (holders.empty()) {
      holder_ended(name, "", Outcome::of(Op::release));
      return;
    }
    auto left = std::make_shared<std::size_t>(holders.size());
    auto failed = std::make_shared<std::optional<Error>>();
    for (std::int64_t connection : holders) {
      control().query(fmt::format("KILL CONNECTION {}", connection),
                      [this, name, left, failed](Answer& killed) {
                        if (killed.error && killed.errnum != ER_NO_SUCH_THREAD && !*failed) {
                          *failed = killed.error;
                        }
                        if (--*left > 0) {
                          return;
                        }
                        if (*failed) {
                          answer(Op::release, **failed);
                          return;
                        }
                        holder_ended(name, "", Outcome::holding(Op::release, true));
                      });
    }
  });
}

void MysqlStore::kill_holder(const lock::LockName& name, const std::string& token,
                             const std::string& server_name, std::int64_t connection)
{
  control().query(fmt::format("KILL CONNECTION {}", connection), [this, name, token, server_name,
                                                                  connection](Answer& a) {
    if (a.error && a.errnum == ER_NO_SUCH_THREAD) {
      // it ended meanwhile
    } else if (a.error && error_code(a.errnum) == ExitCode::auth) {
      answer(Op::release, Error(ExitCode::auth,
                                "release --force on MySQL ends the holder's session with KILL, "
                                "which needs the CONNECTION ADMIN or SUPER privilege (or the "
                                "holder's own user): {}",
                                a.error->what()));
      return;
    } else if (a.error) {
      answer(Op::release, *a.error);
      return;
    }
    confirm_freed(name, token, server_name, connection, freed_tries);
  });
}

void MysqlStore::confirm_freed(const lock::LockName& name, const std::string& token,
                               const std::string& server_name, std::int64_t connection, int tries)
{
  // KILL only marks the session: the lock is free once its thread has noticed (at once when
  // idle, within moments when busy).
  control().query(
    fmt::format("SELECT IS_USED_LOCK({}) <=> {}", sql_bytes(server_name), connection),
    [this, name, token, server_name, connection, tries](Answer& a) {
      bool still = !a.error && a.rows.count() == 1 && a.rows.number(0, 0) == 1;
      if (!still || tries <= 0) {
        auto freed = [this, name, token](Answer&) {
          holder_ended(name, token, Outcome::holding(Op::release, true));
        };
        if (!m_fencing) {
          Answer none;
          freed(none);
          return;
        }
        // the evicted holder's command line, which it had no chance to clear
        control().query(forget_command_sql(server_name, std::to_string(connection)), freed);
        return;
      }
      control().query(freed_pause, [this, name, token, server_name, connection, tries](Answer&) {
        confirm_freed(name, token, server_name, connection, tries - 1);
      });
    });
}

void MysqlStore::let_go(const std::string& name)
{
  // the token's lock too: a session that holds it is found as the lock's holder
  const Named& n = m_named.at(name);
  std::string lock = held_lock(name);
  if (held_of(name).writer) {
    lock += ", RELEASE_LOCK(" + lock_bytes(name) + ")";
  }
  held_of(name) = Held{};
  session(name).query("DO RELEASE_LOCK(" + lock + "), RELEASE_LOCK("
                        + sql_bytes(token_lock_name(n.token)) + ")",
                      nullptr, true);
}

Session& MysqlStore::policy_session(const std::string& name, bool control_session)
{
  return control_session ? control() : session(name);
}

std::string MysqlStore::policy_sql(const std::string& name)
{
  return fmt::format("SELECT {}, p.lock_name IS NOT NULL, {} FROM (SELECT 1) one "
                     "LEFT JOIN dlock_policy p ON p.lock_name = {}",
                     now_ms_sql, policy_columns(), sql_bytes(server_lock_name(m_prefix + name)));
}

std::optional<std::string> MysqlStore::prefetch_policy_sql(const std::string& name)
{
  if (m_no_policy) {
    return std::nullopt;
  }
  return policy_sql(name);
}

void MysqlStore::prefetched_policy(const std::string& name, bool got, std::vector<Answer>& all,
                                   std::size_t at)
{
  Held& held = held_of(name);
  held.policy.reset();
  if (got && all.size() > at) {
    held.policy = std::move(all.at(at));
  }
}

void MysqlStore::read_policy(const std::string& name, bool control_session, bool create,
                             PolicyThen then)
{
  if (!control_session && create && held_of(name).policy) {
    // read in the round trip that took the lock, right after it (prefetched_policy)
    Answer a = std::move(*held_of(name).policy);
    held_of(name).policy.reset();
    if (!a.error) {
      policy_read(name, control_session, create, then, a);
      return;
    }
  }
  policy_session(name, control_session)
    .query(
      policy_sql(name),
      [this, name, control_session, create, then](Answer& a) {
        policy_read(name, control_session, create, then, a);
      },
      true);
}

void MysqlStore::policy_read(const std::string& name, bool control_session, bool create,
                             const PolicyThen& then, Answer& a)
{
  {
    {
      {
        if (a.error && a.errnum == ER_NO_SUCH_TABLE && create && !m_policy_made) {
          m_policy_made = true;
          policy_session(name, control_session)
            .query(
              create_policy_sql,
              [this, name, control_session, then](Answer& created) {
                if (created.error && created.errnum != ER_TABLE_EXISTS_ERROR) {
                  then(PolicyRead{.unavailable = created.error});
                  return;
                }
                read_policy(name, control_session, false, then);
              },
              true);
          return;
        }
        if (a.error && a.errnum == ER_NO_SUCH_TABLE && !create) {
          then(PolicyRead{}); // no table: no record closes the lock
          return;
        }
        if (a.error && fence_unavailable(a.errnum)) {
          then(PolicyRead{.unavailable = a.error});
          return;
        }
        if (a.error || a.rows.count() != 1) {
          then(PolicyRead{.error = a.error});
          return;
        }
        PolicyRead read;
        read.now = a.rows.number(0, 0);
        if (a.rows.number(0, 1) == 1) {
          read.row = sql::policy_row(a.rows, 0, 2);
        }
        if (!control_session) { // what the record arms now, whoever wrote it (write_policy)
          held_of(name).read_armed =
            read.row && (read.row->delay_ms > 0 || read.row->hold_until > read.now);
        }
        then(std::move(read));
      }
    }
  }
}

void MysqlStore::write_policy(const std::string& name, bool control_session,
                              const PolicyWrite& write, WriteThen then)
{
  std::string lock = sql_bytes(server_lock_name(m_prefix + name));
  std::string fp = sql_bytes(write.token_fp);
  std::string sql;
  std::string then_sql; // a second statement, if any
  using Kind = PolicyWrite::Kind;
  switch (write.kind) {
  case Kind::claim:
  case Kind::force:
    if (write.kind == Kind::force && write.delay_ms <= 0) {
      sql = "DELETE FROM dlock_policy WHERE lock_name = " + lock;
      break;
    }
    // force: an armed lock-delay, counted from when the holder ended (now, if not known yet)
    sql = fmt::format(
      "INSERT INTO dlock_policy (lock_name, name, token_fp, session_id, holder, hold_until, "
      "released, delay_ms, ended_at, replace_by) VALUES ({}, {}, {}, {}, {}, {}, 0, {}, {}, '') "
      "ON DUPLICATE KEY UPDATE name = VALUES(name), token_fp = VALUES(token_fp), "
      "session_id = VALUES(session_id), "
      "holder = VALUES(holder), hold_until = VALUES(hold_until), released = 0, "
      "delay_ms = VALUES(delay_ms), ended_at = VALUES(ended_at), replace_by = ''",
      lock, sql_bytes(m_prefix + name), fp, write.kind == Kind::claim ? "CONNECTION_ID()" : "0",
      sql_bytes(write.holder), write.hold_until, write.delay_ms,
      write.kind == Kind::claim ? std::string("0")
      : write.ended_at > 0      ? std::to_string(write.ended_at)
                                : std::string(now_ms_sql));
    break;
  case Kind::stamp:
    sql = fmt::format("UPDATE dlock_policy SET ended_at = {} WHERE lock_name = {} AND token_fp = "
                      "{} AND ended_at = 0",
                      now_ms_sql, lock, fp);
    break;
  case Kind::keep:
    sql = fmt::format("UPDATE dlock_policy SET released = 1, delay_ms = 0 WHERE lock_name = {} "
                      "AND token_fp = {}",
                      lock, fp);
    break;
  case Kind::drop:
    // the newest --supersede waiter's record stays while it lasts (then cleared below)
    sql = fmt::format("DELETE FROM dlock_policy WHERE lock_name = {} AND token_fp = {} AND "
                      "(newest_waiter = '' OR newest_until < {})",
                      lock, fp, now_ms_sql);
    then_sql = fmt::format(
      "UPDATE dlock_policy SET token_fp = '', session_id = 0, holder = '', hold_until = 0, "
      "released = 0, delay_ms = 0, ended_at = 0, replace_by = '' WHERE lock_name = {} AND "
      "token_fp = {}",
      lock, fp);
    break;
  case Kind::sweep:
    // free, no min-hold, no lock-delay still counting (an unstamped one waits for the next
    // acquirer), no supersede waiter
    sql = fmt::format("DELETE FROM dlock_policy WHERE lock_name <> {0} AND hold_until < {1} AND "
                      "(released <> 0 OR delay_ms <= 0 OR replace_by <> '' OR (ended_at > 0 AND "
                      "ended_at < {1} - delay_ms)) AND newest_until < {1} AND "
                      "IS_USED_LOCK(lock_name) IS NULL",
                      lock, now_ms_sql);
    break;
  case Kind::newest:
    sql = fmt::format(
      "INSERT INTO dlock_policy (lock_name, name, token_fp, session_id, holder, hold_until, "
      "released, delay_ms, ended_at, replace_by, newest_waiter, newest, newest_until) VALUES ({}, "
      "{}, '', 0, '', 0, 0, 0, 0, '', {}, {}, {} + {}) ON DUPLICATE KEY UPDATE newest_waiter = "
      "VALUES(newest_waiter), newest = VALUES(newest), newest_until = VALUES(newest_until)",
      lock, sql_bytes(m_prefix + name), sql_bytes(write.waiter), sql_bytes(write.holder),
      now_ms_sql, write.lifetime_ms);
    break;
  case Kind::replace:
    sql = fmt::format("UPDATE dlock_policy SET replace_by = {} WHERE lock_name = {} AND "
                      "token_fp = {} AND session_id = {} AND released = 0",
                      sql_bytes(write.holder), lock, fp, write.session);
    break;
  }
  std::string count;
  if (!then_sql.empty()) {
    count = then_sql;
  }
  if (write.kind == Kind::replace) { // whether the request is there (it may have been already)
    count = fmt::format("SELECT COUNT(*) FROM dlock_policy WHERE lock_name = {} AND token_fp = {} "
                        "AND session_id = {} AND replace_by = {}",
                        lock, fp, write.session, sql_bytes(write.holder));
  }
  if (write.kind == Kind::sweep && !control_session && !then) {
    // best effort and nobody waits: it goes in the release's round trip, after the release,
    // which it does not hold up
    held_of(name).sweep = sql;
    return;
  }
  if (write.kind == Kind::claim && !control_session) {
    held_of(name).armed = write.hold_until > 0 || write.delay_ms > 0;
  }
  Session& s = policy_session(name, control_session);
  std::vector<std::string> statements{sql};
  if (!count.empty()) {
    statements.push_back(count);
  }
  if (write.kind == Kind::drop && !control_session && !held_of(name).armed
      && !held_of(name).read_armed) {
    // A record that arms nothing (no min-hold, no lock-delay: as this holder wrote it, and as
    // the release's read found it) tells the next holder nothing
    // (its claim overwrites it; this token's delete does not match then): it goes after the
    // release, in its round trip, so that a waiter is not held up by its write.
    if (m_fencing) {
      statements.insert(statements.begin(), "START TRANSACTION");
      statements.push_back(
        forget_command_sql(server_lock_name(m_prefix + name), "CONNECTION_ID()"));
      statements.push_back("COMMIT");
      held_of(name).forgotten = true;
    }
    held_of(name).after_release = std::move(statements);
    if (then) {
      then(std::nullopt, 0);
    }
    return;
  }
  // Each write that changes a row waits for the server's log to reach the disk (an fsync with
  // the default innodb_flush_log_at_trx_commit), which costs more than a round trip: the
  // holder's record goes in one transaction with its fencing row (take_fence commits it), and
  // a release's with the clearing of the command line that unlock would do.
  bool transaction =
    !control_session && m_fencing
    && (write.kind == Kind::claim || write.kind == Kind::drop || write.kind == Kind::keep);
  if (transaction) {
    statements.insert(statements.begin(), "START TRANSACTION");
    if (write.kind != Kind::claim) {
      statements.push_back(
        forget_command_sql(server_lock_name(m_prefix + name), "CONNECTION_ID()"));
      statements.push_back("COMMIT");
      held_of(name).forgotten = true;
    }
  }
  if (!then && !transaction && statements.size() == 1) {
    s.query(sql, nullptr, true); // nobody waits: it goes in one round trip with the next one
    return;
  }
  std::size_t first = transaction ? 1 : 0;
  bool counted = !count.empty();
  s.query_all(
    std::move(statements),
    [this, name, control_session, then, first, counted, transaction](std::vector<Answer>& all) {
      bool failed = std::any_of(all.begin(), all.end(), [](const Answer& a) { return a.error; });
      if (transaction && failed) {
        // what the error skipped: the transaction ends before the next step (a failed
        // statement's changes are undone; the rest of what it did is kept, as without one)
        policy_session(name, control_session).query("COMMIT", nullptr, true);
      }
      if (!then) {
        return;
      }
      const Answer& a = all.at(first);
      if (!counted) {
        then(a.error, 0);
        return;
      }
      const Answer& c = all.at(first + 1);
      then(a.error ? a.error : c.error,
           a.error || c.error || c.rows.count() != 1 ? 0 : c.rows.number(0, 0));
    },
    true);
}

sql::HistorySql MysqlStore::history_sql(const std::string& name) const
{
  return sql::HistorySql{.table = "dlock_history",
                         .key = sql_bytes(server_lock_name(m_prefix + name)),
                         .name = sql_bytes(m_prefix + name),
                         .now_ms = now_ms_sql};
}

void MysqlStore::write_history(const std::string& name, bool control_session,
                               const std::string& text, RecordThen then)
{
  write_history(name, control_session, text, std::move(then), false, false);
}

void MysqlStore::write_history(const std::string& name, bool control_session,
                               const std::string& text, RecordThen then, bool created, bool retried)
{
  // One transaction of its own (none of the lock's is open between its steps): one write of
  // the server's log rather than one per statement. An error skips the statements after it,
  // whose answers share it; the transaction is then ended before anything else.
  sql::HistorySql words = history_sql(name);
  std::vector<std::string> statements{
    "START TRANSACTION",
    fmt::format("INSERT INTO dlock_history ({}) VALUES ({}, {}, {}, {})", sql::history_columns,
                words.key, words.name, words.now_ms, sql_bytes(text)),
    sql::history_trim_sql(words, lock::max_history_events), sql::history_expire_sql(words),
    "COMMIT"};
  policy_session(name, control_session)
    .query_all(
      std::move(statements),
      [this, name, control_session, text, then, created, retried](std::vector<Answer>& all) {
        auto failed =
          std::find_if(all.begin(), all.end(), [](const Answer& one) { return one.error; });
        if (failed != all.end()) {
          policy_session(name, control_session).query("COMMIT", nullptr, true);
        }
        if (failed != all.end() && failed->errnum == ER_LOCK_DEADLOCK && !retried) {
          // rolled back whole, as the victim of the other writer, which went on: once more
          write_history(name, control_session, text, then, created, true);
          return;
        }
        Answer& a = all.at(1);
        if (a.error && a.errnum == ER_NO_SUCH_TABLE && !created) { // no table yet: make it
          policy_session(name, control_session)
            .query(
              create_history_sql,
              [this, name, control_session, text, then, retried](Answer& made) {
                if (made.error && made.errnum != ER_TABLE_EXISTS_ERROR) {
                  if (fence_unavailable(made.errnum)) {
                    m_no_history =
                      Error(made.error->code(), "cannot create the table dlock_history: {}",
                            made.error->what());
                  }
                  then(made.error);
                  return;
                }
                write_history(name, control_session, text, then, true, retried);
              },
              true);
          return;
        }
        if (a.error && a.errnum != ER_NO_SUCH_TABLE && fence_unavailable(a.errnum)) {
          m_no_history = a.error; // no right to write it, or a read-only server
        }
        then(failed == all.end() ? std::nullopt : failed->error);
      },
      true);
}

void MysqlStore::read_history(const std::string& name, std::size_t limit,
                              std::function<void(HistoryRead)> then)
{
  control().query(sql::history_read_sql(
                    history_sql(name),
                    fmt::format("LEFT(CAST(event AS BINARY), {})", sql::history_read_bytes), limit),
                  [then](Answer& a) {
                    if (a.error && a.errnum == ER_NO_SUCH_TABLE) {
                      then(HistoryRead{}); // none yet: no events
                      return;
                    }
                    HistoryRead read{.error = a.error};
                    for (int i = 0; !a.error && i < a.rows.count(); ++i) {
                      if (!a.rows.null(i, 0)) {
                        read.texts.push_back(a.rows.text(i, 0));
                      }
                    }
                    then(std::move(read));
                  });
}

std::vector<sql::SqlStore::NamedPolicy> MysqlStore::list_policies(util::TimePoint deadline,
                                                                  std::int64_t& now)
{
  // Names longer than a lock name (another tenant's rows) are left out, not read.
  Answer a = ask(fmt::format("SELECT {}, p.name, {} FROM dlock_policy p WHERE LEFT(p.name, {}) = "
                             "{} AND LENGTH(p.name) <= {} ORDER BY p.name",
                             now_ms_sql, policy_columns(), m_prefix.size(), sql_bytes(m_prefix),
                             m_prefix.size() + lock::max_name_bytes),
                 deadline);
  if (a.error && control().broken()) {
    throw *a.error;
  }
  if (a.error) { // none, or another tenant's table of other columns
    util::log_verbose("no side records listed: {}", a.error->what());
    return {};
  }
  std::vector<NamedPolicy> found;
  for (int i = 0; i < a.rows.count(); ++i) {
    now = a.rows.number(i, 0);
    found.push_back(
      NamedPolicy{a.rows.text(i, 1).substr(m_prefix.size()), sql::policy_row(a.rows, i, 2)});
  }
  return found;
}

Answer MysqlStore::ask(const std::string& sql, util::TimePoint deadline)
{
  std::optional<Answer> got;
  control().query(sql, [&got](Answer& a) { got = std::move(a); });
  block_until([&got] { return got.has_value(); }, deadline);
  return std::move(*got);
}

void MysqlStore::semaphore_status(lock::LockStatus& status, util::TimePoint deadline)
{
  std::string prefixed = m_prefix + status.name;
  std::string sql = "SELECT ";
  for (int i = 0; i < status_slots; ++i) {
    sql +=
      fmt::format("{}IS_USED_LOCK({})", i == 0 ? "" : ", ", sql_bytes(slot_lock_name(prefixed, i)));
  }
  Answer a = ask(sql, deadline);
  if (a.error) {
    throw *a.error;
  }
  int highest = -1;
  for (int i = 0; a.rows.count() == 1 && i < status_slots; ++i) {
    if (a.rows.null(0, i)) {
      continue;
    }
    highest = i;
    lock::HolderInfo holder = holder_of_session(
      SessionRow{.connection = a.rows.number(0, i), .user = {}, .client_host = {}, .written = {}});
    status.slots.push_back(lock::SlotHolder{holder, -1});
  }
  if (status.slots.empty()) {
    return;
  }
  status.held = true;
  // GET_LOCK names do not say N: at least as many slots as the highest one held
  status.kind = lock::LockKind{lock::LockKind::Mode::limit, std::max(2, highest + 1)};
  status.holder = status.slots.front().holder;
}

lock::LockStatus MysqlStore::status(const lock::LockName& name, util::TimePoint deadline)
{
  std::string server_name = server_lock_name(m_prefix + name.str());
  lock::LockStatus status;
  status.name = name.str();
  status.ttl_ms = -1;
  Answer readers = ask(readers_sql(m_prefix + name.str()) + ", IS_USED_LOCK("
                         + sql_bytes(server_name) + "), " + now_ms_sql,
                       deadline);
  if (readers.error) {
    throw *readers.error;
  }
  for (int i = 0; readers.rows.count() == 1 && i < reader_slots; ++i) {
    if (!readers.rows.null(0, i)) {
      status.slots.push_back(lock::SlotHolder{
        holder_of_session(SessionRow{
          .connection = readers.rows.number(0, i), .user = {}, .client_host = {}, .written = {}}),
        -1});
    }
  }
  if (!status.slots.empty()) { // shared holders (and, with the writer's name, a writer waiting)
    status.held = true;
    status.kind = lock::LockKind::shared();
    status.holder = status.slots.front().holder;
    status.waiters = readers.rows.null(0, reader_slots) ? 0 : 1;
    status.server_time_ms = readers.rows.number(0, reader_slots + 1);
    return status;
  }
  Answer a = ask(holder_sql(server_name, true), deadline);
  if (a.error && fence_unavailable(a.errnum)) {
    a = ask(holder_sql(server_name, false), deadline);
  }
  if (a.error) {
    throw *a.error;
  }
  if (a.rows.count() != 1) {
    throw Error(ExitCode::internal, "MySQL at {}: no row for the lock's holder", m_params.shown);
  }
  status.server_time_ms = a.rows.number(0, 3);
  status.last_fence = last_fence(a.rows, 0, 4);
  if (a.rows.null(0, 0)) {
    semaphore_status(status, deadline);
  }
  if (a.rows.null(0, 0) && !status.held) {
    add_policy(status, 0, deadline);
    return status;
  }
  if (a.rows.null(0, 0)) {
    return status;
  }
  status.held = true;
  status.holder = read_holder(a.rows, 0, 0, 4);
  add_policy(status, a.rows.number(0, 0), deadline);
  return status;
}

std::vector<lock::LockStatus> MysqlStore::list(std::string_view pattern, Millis timeout)
{
  util::TimePoint deadline = util::deadline_after(timeout);
  // dlock_fence names the locks dlock took; locks taken without it (no right to create the
  // table) cannot be named, and are not listed.
  // Names longer than a lock name (another tenant's rows) are left out, not read.
  Answer a = ask(fmt::format("SELECT f.name, IS_USED_LOCK(f.lock_name) AS id, p.USER, p.HOST, "
                             "{}, {}FROM dlock_fence f LEFT JOIN information_schema.PROCESSLIST p "
                             "ON p.ID = IS_USED_LOCK(f.lock_name) WHERE LEFT(f.name, {}) = {} "
                             "AND LENGTH(f.name) <= {} ORDER BY f.name",
                             now_ms_sql, fence_columns(), m_prefix.size(), sql_bytes(m_prefix),
                             m_prefix.size() + lock::max_name_bytes),
                 deadline);
  if (a.error && fence_unavailable(a.errnum)) {
    util::log_verbose("no locks to list: {}", a.error->what());
    return {};
  }
  if (a.error) {
    throw *a.error;
  }
  std::string glob(pattern);
  std::vector<lock::LockStatus> found;
  std::map<std::string, std::int64_t> sessions; // the holder's connection id, by name
  for (int i = 0; i < a.rows.count(); ++i) {
    std::string name = a.rows.text(i, 0).substr(m_prefix.size());
    if (a.rows.null(i, 1) || ::fnmatch(glob.c_str(), name.c_str(), 0) != 0) {
      continue;
    }
    lock::LockStatus status;
    status.name = name;
    status.ttl_ms = -1;
    status.held = true;
    status.server_time_ms = a.rows.number(i, 4);
    status.last_fence = last_fence(a.rows, i, 5);
    status.holder = read_holder(a.rows, i, 1, 5);
    sessions[name] = a.rows.number(i, 1);
    found.push_back(std::move(status));
  }
  add_policies(found, sessions, pattern, deadline);
  return found;
}

} // namespace dlock::mysql
