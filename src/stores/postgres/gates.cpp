#include "stores/postgres/gates.hpp"

#include "stores/postgres/semaphore.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace dlock::postgres {

using lock::Outcome;
using util::Millis;
using Op = lock::Outcome::Op;

namespace {

// A watcher looks again this often: a holder whose session ends without a release is not
// announced (the safety net of its wait).
constexpr Millis unannounced_end{2'000};

// The leadership of the leader gate's query (read_leadership): the holding session (pid,
// application_name, role, client, start in µs; NULL pid: free), the granted holders, the
// fence row (fence, acquired ms) and the side record (present, then policy_columns).
sql::SqlGates::Leadership leadership_of(const Rows& rows)
{
  sql::SqlGates::Leadership leadership;
  if (rows.count() != 1 || rows.null(0, 0)) {
    return leadership; // free
  }
  std::int64_t pid = rows.number(0, 0);
  std::int64_t started_us = rows.number(0, 4);
  leadership.holder = holder_of_session(rows.text(0, 1), rows.text(0, 2), rows.text(0, 3), pid);
  leadership.holders = rows.number(0, 5);
  std::optional<std::int64_t> fence;
  if (!rows.null(0, 6)) {
    fence = lock::parse_fence(rows.text(0, 6));
  }
  std::int64_t acquired_ms = rows.null(0, 7) ? 0 : rows.number(0, 7);
  bool recorded = false;
  if (rows.truth(0, 8)) {
    sql::PolicyRow row = sql::policy_row(rows, 0, 9);
    // the record is this session's holder's (not one it left when it ended)
    if (row.session == pid && row.holder && !row.token_fp.empty()) {
      leadership.holder = *row.holder;
      recorded = true;
    }
  }
  std::int64_t recorded_ms = recorded ? leadership.holder.acquired_ms : 0;
  leadership.holder.fence = fence.value_or(0);
  if (acquired_ms > 0) {
    leadership.holder.acquired_ms = acquired_ms;
  }
  if (fence && *fence > 0) {
    leadership.term = *fence;
  } else if (recorded_ms > 0) {
    leadership.term = recorded_ms;
  } else {
    leadership.term = started_us > 0 ? started_us : std::max<std::int64_t>(pid, 1);
  }
  return leadership;
}

// The table in the shared statements, which are written before it is found.
constexpr std::string_view table_mark = "@dlock_gate@";

// sql with the table in place of its mark.
std::string with_table(std::string sql, const std::string& table)
{
  for (std::size_t at = sql.find(table_mark); at != std::string::npos;
       at = sql.find(table_mark, at + table.size())) {
    sql.replace(at, table_mark.size(), table);
  }
  return sql;
}

std::string create_gate_table_sql(const std::string& home)
{
  return "CREATE TABLE IF NOT EXISTS " + home
         + ".dlock_gate (gate_key pg_catalog.int8 NOT NULL, member pg_catalog.text NOT NULL, "
           "generation pg_catalog.int8 NOT NULL, parties pg_catalog.int8 NOT NULL, "
           "latch_count pg_catalog.int8 NOT NULL, until_ms pg_catalog.int8 NOT NULL, "
           "PRIMARY KEY (gate_key, member))";
}

} // namespace

PostgresGates::PostgresGates(ConnectParams params, std::string prefix, Tell answer)
  : SqlGates(std::move(answer), "PostgreSQL", std::move(prefix)), m_params(std::move(params))
{
  m_dialect.table = std::string(table_mark);
  m_dialect.now_ms = "floor(extract(epoch from clock_timestamp()) * 1000)::pg_catalog.int8";
  m_dialect.delete_expired_from =
    std::string("DELETE FROM ") + std::string(table_mark) + " WHERE (gate_key, member) IN ({})";
  m_dialect.insert_new = "INSERT INTO";
  m_dialect.ignore_tail = " ON CONFLICT DO NOTHING";
  m_dialect.upsert_tail = " ON CONFLICT (gate_key, member) DO UPDATE SET generation = "
                          "EXCLUDED.generation, parties = EXCLUDED.parties, latch_count = "
                          "EXCLUDED.latch_count, until_ms = EXCLUDED.until_ms";
}

Session& PostgresGates::session()
{
  if (!m_session || m_session->broken() || !m_session->owned()) {
    m_session.reset();
    m_listening.clear();
    m_in_transaction = false;
    ConnectParams params = m_params;
    params.values.emplace_back("application_name", "dlock gate");
    m_session = std::make_unique<Session>(params);
    m_session->on_notify([this](const std::string& channel) {
      m_rung.insert(channel);
      if (m_wake && m_wake->channel == channel) {
        m_wake.reset();
        m_answer(Outcome::of(Op::wait_for_wake));
      }
    });
    // a row another tenant holds locked does not hang a gate
    m_session->query("SET lock_timeout = '2s'", {}, nullptr);
  }
  return *m_session;
}

std::string PostgresGates::key_of(const lock::LockName& name)
{
  return std::to_string(AdvisoryKey::of(m_prefix + name.str()).key);
}

std::string PostgresGates::channel(const std::string& name) const
{
  return fmt::format("dlock_gate_{:016x}", std::uint64_t(AdvisoryKey::of(m_prefix + name).key));
}

void PostgresGates::prepare(const lock::LockName& name, bool table, std::function<void()> then,
                            std::function<void(Read)> failed)
{
  std::string ch = channel(name.str());
  m_rung.erase(ch); // what rings from now on is after this look
  if (m_listening.count(ch) == 0) {
    m_listening.insert(ch);
    session().query("LISTEN " + ch, {}, nullptr);
  }
  if (!table || (m_table && !m_table->table.empty())) {
    then();
    return;
  }
  session().query(find_fence_table_sql("dlock_gate"), {}, [this, then, failed](Answer& a) {
    if (a.error) {
      failed(Read{.error = a.error});
      return;
    }
    try {
      m_table = fence_table_from(a.rows, m_params.shown);
    } catch (const Error& error) {
      failed(Read{.error = error, .no_table = true});
      return;
    }
    if (!m_table->table.empty()) {
      then();
      return;
    }
    if (m_table->home.empty()) {
      failed(Read{.error = Error(ExitCode::config, "no schema of the search path to create it in"),
                  .no_table = true});
      return;
    }
    session().query(create_gate_table_sql(m_table->home), {},
                    [this, then, failed](Answer& created) {
                      if (created.error && !made_meanwhile(created.sqlstate)) {
                        failed(Read{.error = created.error, .no_table = true});
                        return;
                      }
                      m_table.reset();
                      session().query(find_fence_table_sql("dlock_gate"), {},
                                      [this, then, failed](Answer& found) {
                                        if (!found.error) {
                                          try {
                                            m_table = fence_table_from(found.rows, m_params.shown);
                                          } catch (const Error& error) {
                                            failed(Read{.error = error, .no_table = true});
                                            return;
                                          }
                                        }
                                        if (found.error || m_table->table.empty()) {
                                          failed(Read{.error = found.error, .no_table = true});
                                          return;
                                        }
                                        then();
                                      });
                    });
  });
}

void PostgresGates::transact(const lock::LockName& name, std::vector<std::string> statements,
                             int read, bool commit, bool notify, ReadThen then)
{
  auto failed = [this, then](Read r) {
    m_in_transaction = false;
    then(std::move(r));
  };
  prepare(
    name, true,
    [this, name, statements = std::move(statements), read, commit, notify, then]() mutable {
      // One simple-protocol query: its statements run in order, and stop at an error. Its
      // rows are the last statement's: read is the last one, or none.
      std::string sql = m_in_transaction ? "" : "BEGIN; ";
      for (const std::string& statement : statements) {
        sql += statement + "; ";
      }
      if (notify) {
        sql += "NOTIFY " + channel(name.str()) + "; ";
      }
      if (commit) {
        sql += "COMMIT";
      }
      m_in_transaction = !commit;
      bool rows = read >= 0 && !commit;
      session().query(with_table(sql, m_table->table), {}, [this, then, rows](Answer& a) {
        if (a.error) {
          bool table_gone = a.sqlstate == "42P01" || a.sqlstate == "42501";
          if (table_gone) {
            m_table.reset();
          }
          m_in_transaction = false;
          session().query("ROLLBACK", {}, nullptr, true);
          then(
            Read{.error = a.error,
                 .no_table = a.sqlstate == "42501",
                 .retry = a.sqlstate == "40P01" || a.sqlstate == "40001" || a.sqlstate == "55P03"});
          return;
        }
        try {
          then(rows ? read_rows(a.rows) : Read{});
        } catch (const Error& error) {
          then(Read{.error = error});
        }
      });
    },
    failed);
}

void PostgresGates::select(const lock::LockName& name, std::string statement, ReadThen then)
{
  prepare(
    name, true,
    [this, statement, then] {
      session().query(with_table(statement, m_table->table), {}, [then](Answer& a) {
        if (a.error) {
          then(Read{.error = a.error, .no_table = a.sqlstate == "42501"});
          return;
        }
        try {
          then(read_rows(a.rows));
        } catch (const Error& error) {
          then(Read{.error = error});
        }
      });
    },
    then);
}

void PostgresGates::holding(const lock::LockName& name, HoldingThen then)
{
  AdvisoryKey key = AdvisoryKey::of(m_prefix + name.str());
  prepare(
    name, false,
    [this, key, then] {
      session().query(
        "SELECT floor(extract(epoch from clock_timestamp()) * 1000000)::pg_catalog.int8, l.pid, "
        "l.mode, coalesce(a.application_name, ''), coalesce(a.usename::pg_catalog.text, ''), "
        "coalesce(host(a.client_addr), ''), coalesce(floor(extract(epoch from a.backend_start) * "
        "1000000)::pg_catalog.int8, 0), l.objsubid FROM (SELECT 1) one LEFT JOIN (pg_locks l "
        "LEFT JOIN pg_stat_activity a ON a.pid = l.pid) ON l.locktype = 'advisory' AND "
        "l.classid = $1::oid AND l.granted AND ((l.objid = $2::oid AND l.objsubid = 1) OR "
        "(l.objsubid = 2 AND l.mode = 'ExclusiveLock' AND "
          + Semaphore::offset_sql("l.objid") + " BETWEEN 1 AND "
          + std::to_string(Semaphore::max_limit) + ")) ORDER BY a.backend_start",
        {std::to_string(key.classid()), std::to_string(key.objid())}, [then](Answer& a) {
          Holding holding;
          std::int64_t now = 0;
          if (a.error) {
            then(a.error, holding, 0);
            return;
          }
          try {
            for (int i = 0; i < a.rows.count(); ++i) {
              now = a.rows.number(i, 0);
              if (a.rows.null(i, 1)) {
                continue;
              }
              std::int64_t pid = a.rows.number(i, 1);
              if (holding.sessions.empty()) {
                holding.first =
                  holder_of_session(a.rows.text(i, 3), a.rows.text(i, 4), a.rows.text(i, 5), pid);
              }
              // a --limit slot (objsubid 2) is one of several holders, as a shared one is
              holding.exclusive =
                a.rows.text(i, 2) != "ShareLock" && a.rows.number(i, 7) == 1 && holding.exclusive;
              holding.sessions.push_back(fmt::format("{}@{}", pid, a.rows.text(i, 6)));
            }
          } catch (const Error& error) {
            then(error, Holding{}, 0);
            return;
          }
          then(std::nullopt, std::move(holding), now);
        });
    },
    [then](Read r) { then(r.error, Holding{}, 0); });
}

void PostgresGates::find_side_tables(std::function<void()> then,
                                     std::function<void(const Error&)> failed)
{
  bool fence_known = m_fence_table && !m_fence_table->table.empty();
  bool policy_known = m_policy_table && !m_policy_table->table.empty();
  if (fence_known && policy_known) {
    then();
    return;
  }
  std::string relname = fence_known ? "dlock_policy" : "dlock_fence";
  session().query(find_fence_table_sql(relname), {}, [this, fence_known, then, failed](Answer& a) {
    if (a.error) {
      failed(*a.error);
      return;
    }
    if (fence_known) {
      try {
        m_policy_table = fence_table_from(a.rows, m_params.shown);
      } catch (const Error&) {
        m_policy_table = FenceTable{}; // another role's: no holder records
      }
      then();
      return;
    }
    try {
      m_fence_table = fence_table_from(a.rows, m_params.shown);
    } catch (const Error& error) {
      failed(error); // as status and acquisitions refuse it
      return;
    }
    if (m_fence_table->table.empty()) {
      m_fence_table.reset(); // none yet: looked for again next time
    }
    if (m_fence_table && m_policy_table && !m_policy_table->table.empty()) {
      then();
      return;
    }
    session().query(find_fence_table_sql("dlock_policy"), {}, [this, then, failed](Answer& p) {
      if (p.error) {
        failed(*p.error);
        return;
      }
      try {
        m_policy_table = fence_table_from(p.rows, m_params.shown);
      } catch (const Error&) {
        m_policy_table = FenceTable{};
      }
      then();
    });
  });
}

void PostgresGates::leadership(const lock::LockName& name, LeadershipThen then)
{
  auto failed = [then](const Error& error) { then(error, Leadership{}); };
  prepare(
    name, false,
    [this, name, then, failed] {
      find_side_tables([this, name, then] { read_leadership(name, then); }, failed);
    },
    [then](Read r) {
      then(r.error ? *r.error : Error(ExitCode::internal, "PostgreSQL: no answer"), Leadership{});
    });
}

void PostgresGates::read_leadership(const lock::LockName& name, LeadershipThen then)
{
  AdvisoryKey key = AdvisoryKey::of(m_prefix + name.str());
  bool fence = m_fence_table && !m_fence_table->table.empty();
  bool policy = m_policy_table && !m_policy_table->table.empty();
  // the fence row and the side record of this name (another name of the same key is not it)
  std::string fence_columns = "NULL, NULL";
  if (fence) {
    std::string row = fmt::format("FROM {} f WHERE f.lock_key = $3::pg_catalog.int8 AND f.name = "
                                  "$4 LIMIT 1",
                                  m_fence_table->table);
    fence_columns = fmt::format(
      "(SELECT left(f.fence::pg_catalog.text, 21) {0}), (SELECT CASE WHEN "
      "pg_catalog.isfinite(f.acquired_at) THEN floor(extract(epoch from f.acquired_at) * "
      "1000)::pg_catalog.int8 END {0})",
      row);
  }
  std::string policy_join;
  std::string policy_present = "false";
  std::string record = "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL";
  if (policy) {
    policy_join = fmt::format(" LEFT JOIN {} p ON p.lock_key = $3::pg_catalog.int8 AND p.name = $4",
                              m_policy_table->table);
    policy_present = "p.lock_key IS NOT NULL";
    record = policy_columns();
  }
  std::string sql = fmt::format(
    "SELECT l.pid, coalesce(a.application_name, ''), coalesce(a.usename::pg_catalog.text, ''), "
    "coalesce(host(a.client_addr), ''), coalesce(floor(extract(epoch from a.backend_start) * "
    "1000000)::pg_catalog.int8, 0), (SELECT count(*) FROM pg_catalog.pg_locks c WHERE "
    "c.locktype = 'advisory' AND c.classid = $1::oid AND c.objid = $2::oid AND c.objsubid = 1 "
    "AND c.granted), {}, {}, {} FROM (SELECT 1) one LEFT JOIN (pg_catalog.pg_locks l LEFT JOIN "
    "pg_catalog.pg_stat_activity a ON a.pid = l.pid) ON l.locktype = 'advisory' AND l.classid = "
    "$1::oid AND l.objid = $2::oid AND l.objsubid = 1 AND l.granted{} ORDER BY a.backend_start "
    "LIMIT 1",
    fence_columns, policy_present, record, policy_join);
  std::vector<std::string> params{std::to_string(key.classid()), std::to_string(key.objid())};
  if (fence || policy) {
    // $3 and $4 name the side tables' rows; a statement without them must not be sent them
    params.insert(params.end(), {std::to_string(key.key), m_prefix + name.str()});
  }
  session().query(sql, params, [this, name, then, fence, policy](Answer& a) {
    if (a.error && (policy || fence) && m_session && !m_session->broken()) {
      // a side table another tenant changed (other columns) or dropped: once more without it
      // (both are looked for again at the next look)
      if (policy) {
        m_policy_table = FenceTable{};
      } else {
        m_fence_table.reset();
      }
      read_leadership(name, then);
      return;
    }
    if (a.error) {
      then(a.error, Leadership{});
      return;
    }
    try {
      then(std::nullopt, leadership_of(a.rows));
    } catch (const Error& error) {
      then(error, Leadership{});
    }
  });
}

void PostgresGates::wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                                  Millis block)
{
  std::string ch = channel(name.str());
  if (m_rung.count(ch) != 0 || !m_session || m_session->broken()) {
    m_answer(Outcome::of(Op::wait_for_wake));
    return;
  }
  // A leader watcher that saw a holder is not told of its session's end; one that saw none
  // looks again as often too, as MySQL's does: a safety net for a wake-up not received (seen
  // once under load, cause not found: a watcher idle 10 s after a candidate took the lock).
  if (ticket.mode == lock::WaitMode::watch || ticket.mode == lock::WaitMode::leader) {
    block = std::min(block, unannounced_end);
  }
  m_wake = Wake{ch, util::monotonic_now() + block};
}

void PostgresGates::watch(util::EventLoop& loop)
{
  if (m_session && m_session->owned()) {
    m_session->watch(loop);
  }
  if (m_wake && (m_wake->at <= util::monotonic_now() || (m_session && m_session->broken()))) {
    m_wake.reset();
    m_answer(Outcome::of(Op::wait_for_wake));
    loop.wake_at(util::monotonic_now());
  } else if (m_wake) {
    loop.wake_at(m_wake->at);
  }
}

void PostgresGates::abandon() noexcept
{
  m_wake.reset();
  if (m_session) {
    m_session->cancel();
  }
  m_session.reset(); // ends a transaction in progress (rolled back) and the LISTENs
  m_listening.clear();
  m_in_transaction = false;
}

void PostgresGates::freed(const std::string& name, sql::Session& on, std::function<void()> then)
{
  ring(name, on, std::move(then));
}

void PostgresGates::elected(const std::string& name, sql::Session& on, std::function<void()> then)
{
  ring(name, on, std::move(then));
}

void PostgresGates::ring(const std::string& name, sql::Session& on, std::function<void()> then)
{
  if (on.broken() || !on.owned()) {
    then();
    return;
  }
  static_cast<Session&>(on).query(
    "NOTIFY " + channel(name), {}, [then](Answer&) { then(); }, true);
}

} // namespace dlock::postgres
