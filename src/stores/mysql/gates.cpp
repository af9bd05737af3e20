#include "stores/mysql/gates.hpp"

#include "stores/mysql/names.hpp"
#include "stores/sql/policy.hpp"

#include <mysqld_error.h>

#include <fmt/format.h>

#include <algorithm>

namespace dlock::mysql {

using lock::Outcome;
using util::Millis;
using Op = lock::Outcome::Op;

namespace {

// The longest sleep of a waiter: what opens its gate is not announced to a waiter of another
// user, nor the end of a holder that did not release (the safety net of a wait).
constexpr Millis longest_watch_sleep{2'000};
constexpr Millis longest_gate_sleep{5'000};
// A leader watcher's next look at a holder that had not written its fencing row (a dlock
// taking the lock writes it within moments, and then wakes the watchers).
constexpr Millis longest_settle_sleep{1'000};
// What follows the marker in a leader watcher's sleep: elected() ends those alone; a release
// (the marker alone) ends them with the rest.
constexpr const char* leader_mark = " leader";
// The terms of holders that wrote no fencing row: a session's id above this, which no
// fencing token of dlock_fence reaches (they count from 1).
constexpr std::int64_t session_terms = std::int64_t(1) << 62;

const char* create_gate_sql = "CREATE TABLE IF NOT EXISTS dlock_gate ("
                              "gate_key VARBINARY(64) NOT NULL, " // GET_LOCK's name (names.hpp)
                              "member VARBINARY(64) NOT NULL, generation BIGINT NOT NULL, "
                              "parties BIGINT NOT NULL, latch_count BIGINT NOT NULL, "
                              "until_ms BIGINT NOT NULL, PRIMARY KEY (gate_key, member))";

// Errors that say dlock_gate cannot be used: no right to create, read or write it, a
// read-only server.
bool unusable(unsigned errnum)
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

std::string seconds(Millis block)
{
  return fmt::format("{:.3f}", double(std::max<std::int64_t>(1, block.count())) / 1000.0);
}

} // namespace

MysqlGates::MysqlGates(ConnectParams params, std::string prefix, Tell answer)
  : SqlGates(std::move(answer), "MySQL", std::move(prefix)), m_params(std::move(params))
{
  m_dialect.table = "dlock_gate";
  m_dialect.now_ms = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";
  // the expired rows first (a derived table), each then found by its key: a scan of
  // dlock_gate would wait on every row another session holds
  m_dialect.delete_expired_from = "DELETE g FROM ({}) x STRAIGHT_JOIN " + m_dialect.table
                                  + " g ON g.gate_key = x.gate_key AND g.member = x.member";
  // a duplicate takes the row's exclusive lock at once (INSERT IGNORE's shared one would
  // deadlock two parties that both go on to lock it for update)
  m_dialect.insert_new = "INSERT INTO";
  m_dialect.ignore_tail = " ON DUPLICATE KEY UPDATE gate_key = gate_key";
  m_dialect.upsert_tail = " ON DUPLICATE KEY UPDATE generation = VALUES(generation), parties = "
                          "VALUES(parties), latch_count = VALUES(latch_count), until_ms = "
                          "VALUES(until_ms)";
}

Session& MysqlGates::session()
{
  if (!m_session || m_session->broken() || !m_session->owned()) {
    m_session.reset();
    m_in_transaction = false;
    m_session = std::make_unique<Session>(m_params);
    // a row another tenant holds locked does not hang a gate; read committed: no gap locks,
    // which would deadlock parties arriving at once
    m_session->query("SET SESSION innodb_lock_wait_timeout = 2", nullptr);
    m_session->query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", nullptr);
  }
  return *m_session;
}

Session& MysqlGates::bell()
{
  if (!m_bell || m_bell->broken() || !m_bell->owned()) {
    m_bell = std::make_unique<Session>(m_params);
  }
  return *m_bell;
}

std::string MysqlGates::key_of(const lock::LockName& name)
{
  return sql_bytes(server_lock_name(m_prefix + name.str()));
}

std::string MysqlGates::marker_of(const std::string& prefixed)
{
  static constexpr char hex[] = "0123456789abcdef";
  std::string marker = "dlock gate ";
  for (unsigned char c : server_lock_name(prefixed)) {
    marker.push_back(hex[c >> 4]);
    marker.push_back(hex[c & 15]);
  }
  return marker;
}

void MysqlGates::prepare(std::function<void()> then, std::function<void(Read)> failed)
{
  if (m_table_ready) {
    then();
    return;
  }
  session().query("SELECT 1 FROM dlock_gate LIMIT 0", [this, then, failed](Answer& a) {
    if (!a.error) {
      m_table_ready = true;
      then();
      return;
    }
    if (a.errnum != ER_NO_SUCH_TABLE) {
      failed(Read{.error = a.error, .no_table = unusable(a.errnum)});
      return;
    }
    session().query(create_gate_sql, [this, then, failed](Answer& created) {
      if (created.error && created.errnum != ER_TABLE_EXISTS_ERROR) {
        failed(Read{.error = created.error, .no_table = true});
        return;
      }
      m_table_ready = true;
      then();
    });
  });
}

void MysqlGates::run(std::shared_ptr<std::vector<std::string>> statements, std::size_t at, int read,
                     std::shared_ptr<Read> got, std::function<void(Read)> then)
{
  if (at >= statements->size()) {
    then(std::move(*got));
    return;
  }
  session().query((*statements)[at], [this, statements, at, read, got, then](Answer& a) {
    if (a.error) {
      if (a.errnum == ER_NO_SUCH_TABLE) {
        m_table_ready = false;
      }
      then(Read{.error = a.error,
                .no_table = unusable(a.errnum) && a.errnum != ER_NO_SUCH_TABLE,
                .retry = a.errnum == ER_LOCK_DEADLOCK || a.errnum == ER_LOCK_WAIT_TIMEOUT});
      return;
    }
    if (int(at) == read) {
      try {
        *got = read_rows(a.rows);
      } catch (const Error& error) {
        then(Read{.error = error});
        return;
      }
    }
    run(statements, at + 1, read, got, then);
  });
}

void MysqlGates::transact(const lock::LockName& name, std::vector<std::string> statements, int read,
                          bool commit, bool notify, ReadThen then)
{
  auto failed = [this, then](Read r) {
    m_in_transaction = false;
    then(std::move(r));
  };
  std::string marker = marker_of(m_prefix + name.str());
  prepare(
    [this, statements = std::move(statements), read, commit, notify, then, marker]() mutable {
      auto all = std::make_shared<std::vector<std::string>>();
      if (!m_in_transaction) {
        all->push_back("START TRANSACTION");
        read = read >= 0 ? read + 1 : read;
      }
      all->insert(all->end(), statements.begin(), statements.end());
      if (commit) {
        all->push_back("COMMIT");
      }
      m_in_transaction = !commit;
      run(all, 0, read, std::make_shared<Read>(), [this, notify, then, marker](Read got) {
        if (got.error) {
          m_in_transaction = false;
          session().query("ROLLBACK", nullptr, true);
          then(std::move(got));
          return;
        }
        if (!notify) {
          then(std::move(got));
          return;
        }
        auto kept = std::make_shared<Read>(std::move(got));
        ring(bell(), marker, [then, kept] { then(std::move(*kept)); });
      });
    },
    failed);
}

void MysqlGates::select(const lock::LockName&, std::string statement, ReadThen then)
{
  prepare(
    [this, statement, then] {
      run(std::make_shared<std::vector<std::string>>(1, statement), 0, 0, std::make_shared<Read>(),
          then);
    },
    then);
}

void MysqlGates::holding(const lock::LockName& name, HoldingThen then)
{
  // The lock's own name, then its reader names (--shared) and its first slots (--limit): a
  // session on the own name while readers are in is an exclusive holder waiting for them.
  std::string prefixed = m_prefix + name.str();
  std::vector<std::string> names{sql_bytes(server_lock_name(prefixed))};
  for (int i = 0; i < reader_slots; ++i) {
    names.push_back(sql_bytes(reader_lock_name(prefixed, i)));
    names.push_back(sql_bytes(slot_lock_name(prefixed, i)));
  }
  std::string used;
  for (std::size_t i = 0; i < names.size(); ++i) {
    used += fmt::format("{}SELECT {} AS n, IS_USED_LOCK({}) AS id", i == 0 ? "" : " UNION ALL ", i,
                        names[i]);
  }
  std::string key = name.str();
  session().query(
    "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), u.id, LEFT(p.USER, 255), "
    "LEFT(p.HOST, 255), u.n FROM (SELECT 1) one LEFT JOIN ("
      + used
      + ") u ON u.id IS NOT NULL LEFT JOIN information_schema.PROCESSLIST p ON p.ID = u.id "
        "ORDER BY u.n",
    [this, then, key, names](Answer& a) {
      Holding holding;
      if (a.error || a.rows.count() < 1) {
        then(a.error ? a.error
                     : std::optional<Error>(Error(ExitCode::internal, "MySQL: no answer")),
             holding, 0);
        return;
      }
      std::int64_t now = 0;
      try {
        now = a.rows.number(0, 0);
        std::optional<SessionRow> own;
        std::vector<std::pair<std::size_t, SessionRow>> others;
        for (int i = 0; i < a.rows.count(); ++i) {
          if (a.rows.null(i, 1)) {
            continue;
          }
          SessionRow row{.connection = a.rows.number(i, 1),
                         .user = a.rows.text(i, 2),
                         .client_host = a.rows.text(i, 3),
                         .written = std::nullopt};
          std::int64_t n = a.rows.number(i, 4);
          if (n == 0) {
            own = row;
          } else if (n > 0 && std::size_t(n) < names.size()) {
            others.emplace_back(std::size_t(n), row);
          }
        }
        if (!others.empty()) {
          holding.exclusive = false;
          holding.first = holder_of_session(others.front().second);
          for (const auto& [n, row] : others) {
            holding.sessions.push_back(std::to_string(row.connection));
          }
          m_holder[key] = {names[others.front().first], others.front().second.connection};
        } else if (own) {
          holding.first = holder_of_session(*own);
          holding.sessions.push_back(std::to_string(own->connection));
          m_holder[key] = {names[0], own->connection};
        }
      } catch (const Error& error) {
        then(error, Holding{}, 0);
        return;
      }
      then(std::nullopt, std::move(holding), now);
    });
}

std::int64_t MysqlGates::leader_term(const LeaderLook& look)
{
  if (look.connection <= 0) {
    return 0;
  }
  if (look.fence > 0 && look.fence < session_terms && look.fence_connection == look.connection) {
    return look.fence;
  }
  return session_terms + look.connection % session_terms;
}

bool MysqlGates::unwritten(const LeaderLook& look)
{
  return look.connection > 0 && look.fence_read && look.fence_connection != look.connection;
}

void MysqlGates::leadership(const lock::LockName& name, LeadershipThen then)
{
  look_leader(name, true, true, false, std::move(then));
}

void MysqlGates::look_leader(const lock::LockName& name, bool with_fence, bool with_policy,
                             bool settled, LeadershipThen then)
{
  // columns: 0 id, 1 USER, 2 HOST, 3..9 fence_columns, 10 the fence's text (as the sleep
  // compares it), 11 dlock_policy's session, 12 its holder
  std::string key = key_of(name);
  std::string sql = "SELECT u.id, LEFT(p.USER, 255), LEFT(p.HOST, 255), ";
  sql += with_fence ? fence_columns() + ", LEFT(CAST(f.fence AS BINARY), 21)"
                    : std::string("NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL");
  sql += with_policy ? fmt::format(", LEFT(CAST(d.session_id AS BINARY), 21), LEFT(CAST(d.holder "
                                   "AS BINARY), {})",
                                   lock::max_holder_record_bytes + 1)
                     : std::string(", NULL, NULL");
  sql += " FROM (SELECT IS_USED_LOCK(" + key
         + ") AS id) u LEFT JOIN information_schema.PROCESSLIST p ON p.ID = u.id";
  if (with_fence) {
    sql += " LEFT JOIN dlock_fence f ON f.lock_name = " + key;
  }
  if (with_policy) {
    sql += " LEFT JOIN dlock_policy d ON d.lock_name = " + key;
  }
  session().query(sql, [this, name, with_fence, with_policy, settled, then](Answer& a) {
    if (a.error && (with_fence || with_policy)
        && (unusable(a.errnum) || a.errnum == ER_BAD_FIELD_ERROR)) {
      // a table that is not there, or another tenant's of other columns: without it
      look_leader(name, with_fence && with_policy, false, settled, then);
      return;
    }
    if (a.error || a.rows.count() != 1) {
      then(a.error ? *a.error : Error(ExitCode::internal, "MySQL: no answer"), Leadership{});
      return;
    }
    LeaderLook look;
    look.fence_read = with_fence;
    LeaderSeen seen{.connection = 0, .fence_read = with_fence, .fence = std::nullopt};
    try {
      const Rows& rows = a.rows;
      look.connection = rows.null(0, 0) ? 0 : rows.number(0, 0);
      if (with_fence && !rows.null(0, 10)) {
        seen.fence = rows.text(0, 10);
        look.fence_connection = lock::parse_record_number(rows.text(0, 5)).value_or(0);
        look.fence = lock::parse_fence(rows.text(0, 10)).value_or(0);
      }
      if (look.connection > 0) {
        look.holder = read_holder(rows, 0, 0, 3);
        std::optional<lock::HolderInfo> recorded;
        if (with_policy && lock::parse_record_number(rows.text(0, 11)) == look.connection) {
          recorded = sql::decode_holder(rows.text(0, 12)); // none: not a record dlock wrote
        }
        if (recorded) { // with its note and value; the times and token of its fencing row
          recorded->fence = look.holder.fence;
          if (look.holder.acquired_ms != 0) {
            recorded->acquired_ms = look.holder.acquired_ms;
          }
          look.holder = *recorded;
        }
      }
    } catch (const Error& error) {
      then(error, Leadership{});
      return;
    }
    seen.connection = look.connection;
    m_leader[name.str()] = seen;
    if (!settled && unwritten(look)) {
      // KILL QUERY (elected) ends the sleep early, with an error that says nothing here
      session().query(leader_sleep(name, longest_settle_sleep),
                      [this, name, with_fence, with_policy, then](Answer&) {
                        look_leader(name, with_fence, with_policy, true, then);
                      });
      return;
    }
    then(std::nullopt, Leadership{.term = leader_term(look),
                                  .holder = look.holder,
                                  .holders = look.connection > 0 ? 1 : 0});
  });
}

std::string MysqlGates::leader_sleep(const lock::LockName& name, Millis block)
{
  std::string key = key_of(name);
  auto found = m_leader.find(name.str());
  LeaderSeen seen = found == m_leader.end() ? LeaderSeen{} : found->second;
  std::string same = fmt::format("IS_USED_LOCK({}) <=> {}", key,
                                 seen.connection > 0 ? std::to_string(seen.connection) : "NULL");
  if (seen.fence_read) {
    same += fmt::format(" AND (SELECT LEFT(CAST(f.fence AS BINARY), 21) FROM dlock_fence f WHERE "
                        "f.lock_name = {} LIMIT 1) <=> {}",
                        key, seen.fence ? sql_bytes(*seen.fence) : "NULL");
  }
  return fmt::format("SELECT IF({}, SLEEP({}), 0), '{}{}'", same, seconds(block),
                     marker_of(m_prefix + name.str()), leader_mark);
}

void MysqlGates::wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                               Millis block)
{
  std::string key = key_of(name);
  std::string marker = marker_of(m_prefix + name.str());
  std::string sql;
  switch (ticket.mode) {
  case lock::WaitMode::watch: {
    auto seen = m_holder.find(name.str());
    std::pair<std::string, std::int64_t> holder =
      seen == m_holder.end() ? std::pair<std::string, std::int64_t>{key, 0} : seen->second;
    sql = fmt::format("SELECT IF(IS_USED_LOCK({}) <=> {}, SLEEP({}), 0), '{}'", holder.first,
                      holder.second, seconds(std::min(block, longest_watch_sleep)), marker);
    break;
  }
  case lock::WaitMode::leader: // while the holder and its fencing row are those last seen
    sql = leader_sleep(name, std::min(block, longest_watch_sleep));
    break;
  case lock::WaitMode::barrier:
    sql = fmt::format("SELECT IF(COALESCE((SELECT MAX(generation) FROM dlock_gate WHERE gate_key "
                      "= {} AND member = 'barrier'), 0) > {}, 0, SLEEP({})), '{}'",
                      key, ticket.generation, seconds(std::min(block, longest_gate_sleep)), marker);
    break;
  default:
    sql = fmt::format("SELECT IF(EXISTS (SELECT 1 FROM dlock_gate WHERE gate_key = {} AND member "
                      "= 'latch' AND latch_count = 0 AND until_ms >= {}), 0, SLEEP({})), '{}'",
                      key, m_dialect.now_ms, seconds(std::min(block, longest_gate_sleep)), marker);
    break;
  }
  bool leader = ticket.mode == lock::WaitMode::leader;
  session().query(sql, [this, leader](Answer& a) {
    // KILL QUERY ends the sleep early (SLEEP answers 1, or the query is interrupted); a
    // leader watcher's dlock_fence gone is for its next look to see
    bool woken = !a.error || a.errnum == ER_QUERY_INTERRUPTED
                 || (leader && (unusable(a.errnum) || a.errnum == ER_BAD_FIELD_ERROR));
    m_answer(Outcome::of(Op::wait_for_wake, woken ? std::nullopt : a.error));
  });
}

void MysqlGates::ring(Session& s, const std::string& marker, std::function<void()> then)
{
  // The waiters' statements start with "SELECT IF(" (a ringer's own does not: it is not
  // killed by another ringer). The KILLs go out in order after this answer, which does not
  // wait for them: MariaDB 10.11 was seen to keep a KILL QUERY of a sleeping session waiting
  // for seconds, and the sleeper's look at the end of its sleep is the safety net.
  s.query(
    ring_sql(marker),
    [&s, then](Answer& a) {
      kill_sleeps(s, a);
      then();
    },
    true);
}

std::string MysqlGates::ring_sql(const std::string& marker)
{
  return fmt::format("SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() "
                     "AND INFO LIKE 'SELECT IF(%{}%' LIMIT 1000",
                     marker);
}

void MysqlGates::kill_sleeps(Session& s, const Answer& a)
{
  for (int i = 0; !a.error && i < a.rows.count(); ++i) {
    try {
      s.query(fmt::format("KILL QUERY {}", a.rows.number(i, 0)), nullptr, true);
    } catch (const Error&) {
    }
  }
}

std::string MysqlGates::freed_sql(const std::string& name)
{
  return ring_sql(marker_of(m_prefix + name));
}

void MysqlGates::sleepers_found(const std::string& name, const Session& on, const Answer& a)
{
  m_sleepers.insert_or_assign(name, std::make_pair(&on, a));
}

void MysqlGates::watch(util::EventLoop& loop)
{
  if (m_session && m_session->owned()) {
    m_session->watch(loop);
  }
  if (m_bell && m_bell->owned()) {
    m_bell->watch(loop);
  }
}

void MysqlGates::abandon() noexcept
{
  m_session.reset(); // ends a transaction in progress (rolled back), and a sleep
  m_bell.reset();
  m_in_transaction = false;
}

void MysqlGates::elected(const std::string& name, sql::Session& on, std::function<void()> then)
{
  if (on.broken() || !on.owned()) {
    then();
    return;
  }
  ring(static_cast<Session&>(on), marker_of(m_prefix + name) + leader_mark, std::move(then));
}

void MysqlGates::freed(const std::string& name, sql::Session& on, std::function<void()> then)
{
  auto found = m_sleepers.find(name);
  if (found != m_sleepers.end()) {
    std::pair<const Session*, Answer> sleepers = std::move(found->second);
    m_sleepers.erase(found);
    if (sleepers.first == &on) { // looked up in the release's round trip, on this session
      if (!on.broken() && on.owned()) {
        kill_sleeps(static_cast<Session&>(on), sleepers.second);
      }
      then();
      return;
    }
  }
  if (on.broken() || !on.owned()) {
    then();
    return;
  }
  ring(static_cast<Session&>(on), marker_of(m_prefix + name), std::move(then));
}

} // namespace dlock::mysql
