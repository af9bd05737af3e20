#include "stores/postgres/postgres_store.hpp"

#include "stores/postgres/gates.hpp"

#include "util/clock.hpp"
#include "util/log.hpp"
#include "util/url.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace dlock::postgres {

using lock::Outcome;
using util::Millis;

namespace {

// The rows of pg_locks that are one advisory key's ($1: classid, $2: objid), granted or not.
constexpr const char* key_rows = "l.locktype = 'advisory' AND l.classid = $1::oid AND "
                                 "l.objid = $2::oid AND l.objsubid = 1";

// The first int4 of a --fair ticket's advisory lock ("dloc"), the second is the ticket.
constexpr std::int32_t fair_class = 0x646c6f63;

// The rows of dlock_queue q whose waiter is alive: its session holds its ticket lock (any
// ticket another tenant wrote maps to an oid: none fails the query).
std::string live_ticket(const char* q)
{
  return fmt::format("EXISTS (SELECT 1 FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' "
                     "AND l.objsubid = 2 AND l.classid = {0} AND l.objid = (({1}.ticket % "
                     "4294967296 + 4294967296) % 4294967296)::pg_catalog.oid AND l.pid = "
                     "{1}.session_id AND l.granted)",
                     fair_class, q);
}

// The int4 of a ticket, as its advisory lock takes it.
std::int32_t ticket_arg(std::int64_t ticket) { return std::int32_t(std::uint32_t(ticket)); }

// A wait of a semaphore holder blocks on one slot in the server, whichever of them frees
// first: it looks at the others again this often (the slot it blocks on wakes it at once).
constexpr Millis slot_block{2'000};

// The rows of pg_locks that are the slots of the semaphore of key ($1, $2 as key_rows),
// granted or not.
std::string slot_rows()
{
  return "l.locktype = 'advisory' AND l.objsubid = 2 AND l.classid = $1::oid AND "
         + Semaphore::offset_sql("l.objid") + " BETWEEN 1 AND "
         + std::to_string(Semaphore::max_limit);
}

// The rows of pg_locks of the kind markers of semaphores of key ($1, $2 as key_rows).
std::string marker_rows()
{
  return "l.locktype = 'advisory' AND l.objsubid = 2 AND l.classid = $1::oid AND l.granted AND "
         "l.mode = 'ShareLock' AND "
         + Semaphore::offset_sql("l.objid")
         + " >= " + std::to_string((std::int64_t(1) << 32) - Semaphore::max_limit);
}

std::vector<std::string> key_params(const AdvisoryKey& key)
{
  return {std::to_string(key.classid()), std::to_string(key.objid())};
}

// The kind markers of semaphores of key ($1, $2 as key_rows) that pg_locks shows, as offsets.
std::string markers_sql()
{
  return "SELECT " + Semaphore::offset_sql("l.objid") + " FROM pg_catalog.pg_locks l WHERE "
         + marker_rows();
}

// sql (of ours) with key's numbers in place of its parameters $1 and $2 (as key_params), for
// a message of several statements, which cannot have parameters.
std::string with_key(std::string sql, const AdvisoryKey& key)
{
  std::vector<std::string> values = key_params(key);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::string param = "$" + std::to_string(i + 1);
    for (std::size_t at = sql.find(param); at != std::string::npos;
         at = sql.find(param, at + values[i].size())) {
      sql.replace(at, param.size(), values[i]);
    }
  }
  return sql;
}

// A claim's statement (write_policy) with how it ends in place of its mark.
std::string with_replace_by(std::string sql, const std::string& end)
{
  std::size_t at = sql.find("@replace_by@");
  return at == std::string::npos ? sql : sql.replace(at, 12, end);
}

// The settings after which the server may end a session (session_lifetime.hpp).
constexpr const char* session_settings[] = {"idle_session_timeout", "tcp_user_timeout",
                                            "tcp_keepalives_idle", "tcp_keepalives_interval",
                                            "tcp_keepalives_count"};

// A one-row subquery that sets lock_timeout to ms for the rest of its transaction (its
// message): a wait that selects from it ends by then (55P03), and no RESET is needed after.
// Not flattened into the query (its target is volatile), so it runs before the wait.
std::string lock_timeout_sql(std::int64_t ms)
{
  return fmt::format("(SELECT pg_catalog.set_config('lock_timeout', '{}', true)) t", ms);
}

// The semaphore of a name whose kind is kind.
Semaphore semaphore_of(const std::string& prefixed, const lock::LockKind& kind)
{
  return Semaphore{AdvisoryKey::of(prefixed), kind.limit};
}

// A condition that is always true and makes the commit of the statement's transaction
// asynchronous (no wait for the WAL flush), for a write whose loss in a server crash only
// keeps a lock closed longer (a release's record), or that a synchronous write flushes
// anyway before any command runs (the holder's record before its fencing token: the WAL is
// flushed in order). Evaluated for each row written, so whenever the statement writes.
constexpr const char* async_commit =
  "pg_catalog.set_config('synchronous_commit', 'off', true) = 'off'";

std::string now_ms_sql() { return "floor(extract(epoch from clock_timestamp()) * 1000)::bigint"; }

// A timestamptz column of dlock_fence in Unix ms, NULL when another tenant of the database
// wrote one that has none ('infinity'), which would fail the whole query.
std::string acquired_ms_sql(const char* column)
{
  return fmt::format("CASE WHEN isfinite({0}) THEN floor(extract(epoch from {0}) * 1000)::bigint "
                     "END",
                     column);
}

// The holders of a key, from rows of (pid, granted, mode, application_name, role, client).
struct Holders {
  std::vector<lock::HolderInfo> granted;
  std::vector<std::int64_t> sessions; // backend pids of granted
  bool shared = false;
  std::int64_t waiting = 0;
};

Holders read_holders(const Rows& rows)
{
  Holders holders;
  for (int i = 0; i < rows.count(); ++i) {
    if (!rows.truth(i, 1)) {
      ++holders.waiting;
      continue;
    }
    holders.shared = rows.text(i, 2) == "ShareLock";
    holders.sessions.push_back(rows.number(i, 0));
    holders.granted.push_back(
      holder_of_session(rows.text(i, 3), rows.text(i, 4), rows.text(i, 5), rows.number(i, 0)));
  }
  return holders;
}

std::string holders_sql(const std::string& where)
{
  return "SELECT l.pid, l.granted, l.mode, coalesce(a.application_name, ''), "
         "coalesce(a.usename::text, ''), coalesce(host(a.client_addr), '') "
         "FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE "
         + where + " ORDER BY l.granted DESC, a.backend_start";
}

// Whether port is libpq's port list (a number from 1 to 65535 per host, comma-separated):
// libpq's parser takes any text and rejects it only when it connects, which would read as an
// unreachable server (69) rather than a mistyped URL (64).
bool valid_ports(std::string_view ports)
{
  for (std::string_view rest = ports;;) {
    std::string_view one = rest.substr(0, rest.find(','));
    int number = 0;
    auto [end, error] = std::from_chars(one.data(), one.data() + one.size(), number);
    if (!one.empty()
        && (error != std::errc{} || end != one.data() + one.size() || number < 1
            || number > 65535)) {
      return false;
    }
    if (one.size() == rest.size()) {
      return true;
    }
    rest.remove_prefix(one.size() + 1);
  }
}

} // namespace

bool is_postgres_url(const std::string& url)
{
  return url.starts_with("postgres://") || url.starts_with("postgresql://");
}

ConnectParams connect_params(const std::string& url, const stores::StoreConfig& config)
{
  char* message = nullptr;
  PQconninfoOption* options = pq().PQconninfoParse(url.c_str(), &message);
  if (options == nullptr) {
    std::string why = message != nullptr ? message : "cannot parse it";
    if (message != nullptr) {
      ::free(message); // NOLINT: libpq allocates it with malloc
    }
    while (!why.empty() && why.back() == '\n') {
      why.pop_back();
    }
    // libpq quotes what it could not parse, which may be the URL or a password in it
    throw Error(ExitCode::usage, "bad PostgreSQL URL: {}", util::without_url_secrets(why, url));
  }
  std::string host = "localhost", port, dbname, user;
  bool sslmode = false;
  for (PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
    if (option->val == nullptr) {
      continue;
    }
    std::string keyword = option->keyword;
    if (keyword == "host" || keyword == "hostaddr") {
      host = option->val;
    } else if (keyword == "port") {
      port = option->val;
    } else if (keyword == "dbname") {
      dbname = option->val;
    } else if (keyword == "user") {
      user = option->val;
    } else if (keyword == "sslmode") {
      sslmode = true;
    }
  }
  pq().PQconninfoFree(options);
  if (!valid_ports(port)) {
    throw Error(ExitCode::usage, "bad PostgreSQL URL: port '{}' is not a number from 1 to 65535",
                port);
  }
  ConnectParams params;
  params.shown = "postgres://" + (user.empty() ? "" : user + "@") + host
                 + (port.empty() ? "" : ":" + port) + "/" + dbname;
  params.values.emplace_back("dbname", url);
  if (config.password) {
    params.values.emplace_back("password", *config.password);
  }
  auto seconds = std::max<std::int64_t>(2, (config.request_timeout.count() + 999) / 1000);
  params.values.emplace_back("connect_timeout", std::to_string(seconds));
  if (!config.tls.ca_file.empty()) {
    params.values.emplace_back("sslrootcert", config.tls.ca_file);
  }
  if (!config.tls.cert_file.empty()) {
    params.values.emplace_back("sslcert", config.tls.cert_file);
  }
  if (!config.tls.key_file.empty()) {
    params.values.emplace_back("sslkey", config.tls.key_file);
  }
  // TLS files given to dlock mean TLS to the server named in the URL, as for mysql://;
  // libpq's own default (prefer) would go on in clear text, or trust any certificate.
  const char* env_sslmode = std::getenv("PGSSLMODE");
  bool tls_files =
    !config.tls.ca_file.empty() || !config.tls.cert_file.empty() || !config.tls.key_file.empty();
  if (tls_files && !sslmode && (env_sslmode == nullptr || *env_sslmode == '\0')) {
    params.values.emplace_back("sslmode", "verify-full");
  }
  return params;
}

PostgresStore::PostgresStore(ConnectParams params, std::string prefix)
  : SqlStore("PostgreSQL", params.shown, std::move(prefix), "idle_session_timeout"),
    m_params(std::move(params))
{
  m_gates = std::make_unique<PostgresGates>(
    m_params, m_prefix, [this](Outcome outcome) { answer(std::move(outcome)); });
}

std::unique_ptr<sql::Session> PostgresStore::open_session(const Named& n)
{
  m_held.erase(n.prefixed); // a new session holds nothing yet
  ConnectParams params = m_params;
  params.values.emplace_back("application_name", application_name(n.token, n.holder));
  return std::make_unique<Session>(params);
}

std::unique_ptr<sql::Session> PostgresStore::open_control()
{
  ConnectParams params = m_params;
  params.values.emplace_back("application_name", "dlock");
  return std::make_unique<Session>(params);
}

void PostgresStore::read_limit(const std::string& name, const lock::AcquireRequest& request)
{
  // In the same round trip (and the session's pin, session.hpp): where dlock_fence and
  // dlock_policy are, for find_fence and find_policy to take in their turn.
  // current_setting, not the view pg_settings, which makes a row of every setting first;
  // NULL: a setting this server does not have (idle_session_timeout before PostgreSQL 14)
  std::string sql = "SELECT inet_client_addr() IS NOT NULL";
  for (const char* setting : session_settings) {
    sql += fmt::format(", pg_catalog.current_setting('{}', true)", setting);
  }
  bool fence = !m_fence && m_fencing && !m_found_fence;
  bool policy = !m_policy && !m_no_policy && !m_found_policy;
  if (fence) {
    sql += "; " + find_fence_table_sql();
  }
  if (policy) {
    sql += "; " + find_fence_table_sql("dlock_policy");
  }
  session(name).query(
    sql, {},
    [this, name, request, fence, policy](Answer& a) {
      if (a.results.empty()) {
        answer(Op::acquire,
               a.error.value_or(Error(ExitCode::internal, "PostgreSQL at {}: no answer", m_shown)));
        return;
      }
      // a table's query that failed is asked again, alone, where its answer is handled
      std::size_t next = 1;
      if (fence && next < a.results.size()) {
        m_found_fence = a.results[next++];
      }
      if (policy && next < a.results.size()) {
        m_found_policy = a.results[next];
      }
      const Rows& rows = a.results.front();
      SessionSettings settings;
      try {
        for (int i = 0; i < rows.count(); ++i) {
          settings.over_tcp = rows.truth(i, 0);
          for (std::size_t s = 0; s < std::size(session_settings); ++s) {
            if (!rows.null(i, int(s) + 1)) {
              settings.take_shown(session_settings[s], rows.text(i, int(s) + 1));
            }
          }
        }
      } catch (const Error& error) {
        answer(Op::acquire, error);
        return;
      }
      limit_found(name, request, session_limit(settings));
    },
    true);
}

void PostgresStore::before_first_try(const std::string& name, std::function<void()> then)
{
  find_fence(session(name), std::move(then),
             [this](const Error& error) { answer(Op::acquire, error); });
}

void PostgresStore::find_fence(Session& session, std::function<void()> then,
                               std::function<void(const Error&)> failed)
{
  if (m_fence || !m_fencing) {
    then();
    return;
  }
  auto found = [this, then, failed](Answer& a) {
    if (a.error) {
      failed(*a.error);
      return;
    }
    try {
      m_fence = fence_table_from(a.rows, m_params.shown);
    } catch (const Error& error) {
      failed(error);
      return;
    }
    then();
  };
  if (m_found_fence) { // read with the session's limits
    Answer a{.rows = *m_found_fence};
    m_found_fence.reset();
    found(a);
    return;
  }
  session.query(find_fence_table_sql(), {}, found, true);
}

void PostgresStore::try_lock(const std::string& name, const lock::AcquireRequest& request)
{
  m_prefetched.reset();
  if (request.kind.mode == lock::LockKind::Mode::limit) {
    try_semaphore(name, request);
    return;
  }
  if (request.ticket.mode == lock::WaitMode::fair && !held_of(name).ticket) {
    find_queue(name, [this, name, request](const std::optional<Error>& error) {
      if (error) {
        answer(Op::acquire,
               Error(error->code(),
                     "--fair (and elect) on PostgreSQL needs the table dlock_queue, which dlock "
                     "cannot use: {}",
                     error->what()));
        return;
      }
      // a ticket, and its lock, in one statement: the row is never seen without its lock
      session(name).query(
        fmt::format("WITH t AS (INSERT INTO {} (lock_key, session_id) VALUES ($1, "
                    "pg_catalog.pg_backend_pid()) RETURNING ticket) SELECT t.ticket, "
                    "pg_catalog.pg_advisory_lock({}, (t.ticket % 4294967296 - CASE WHEN t.ticket "
                    "% 4294967296 >= 2147483648 THEN 4294967296 ELSE 0 END)::int4) FROM t",
                    m_queue->table, fair_class),
        {std::to_string(key_of(name).key)},
        [this, name, request](Answer& a) {
          if (a.error || a.rows.count() != 1) {
            answer(Op::acquire,
                   a.error ? Error(a.error->code(),
                                   "--fair on PostgreSQL: cannot write the table "
                                   "dlock_queue: {}",
                                   a.error->what())
                           : Error(ExitCode::internal, "PostgreSQL: no ticket from dlock_queue"));
            return;
          }
          held_of(name).ticket = a.rows.number(0, 0);
          try_fair(name, request);
        },
        true);
    });
    return;
  }
  if (request.ticket.mode == lock::WaitMode::fair) {
    try_fair(name, request);
    return;
  }
  bool shared = request.kind.mode == lock::LockKind::Mode::shared;
  AdvisoryKey key = key_of(name);
  // What after_taken and check_policy read right after the lock is taken goes in the same
  // round trip, after it (the statements of one message run in order): the semaphore
  // markers, and the side record once dlock_policy is known.
  std::string sql = fmt::format("SELECT pg_try_advisory_lock{}({}); {}", shared ? "_shared" : "",
                                key.key, with_key(markers_sql(), key));
  adopt_found_policy();
  bool policy = !m_no_policy && m_policy && !m_policy->table.empty();
  if (policy) {
    sql += "; " + policy_read_sql(std::to_string(key.key));
  }
  // and where dlock_history is, for the acquisition's event (find_history), once per process
  bool history = !m_history && !m_no_history && !m_found_history;
  if (history) {
    sql += "; " + find_fence_table_sql("dlock_history");
  }
  session(name).query(
    sql, {},
    [this, name, request, policy, history](Answer& a) {
      if (a.results.empty()) {
        answer(Op::acquire,
               a.error.value_or(Error(ExitCode::internal, "PostgreSQL at {}: no answer", m_shown)));
        return;
      }
      if (std::size_t at = policy ? 3 : 2; history && a.results.size() > at) {
        m_found_history = a.results[at];
      }
      const Rows& tried_rows = a.results.front();
      bool taken = tried_rows.count() == 1 && tried_rows.truth(0, 0);
      if (taken) { // a read that failed is asked again, alone, where its answer is handled
        Prefetched read{.name = name};
        if (a.results.size() > 1) {
          read.markers = a.results[1];
        }
        if (policy && a.results.size() > 2) {
          read.policy = Answer{.rows = a.results[2]};
        }
        m_prefetched = std::move(read);
      }
      tried(name, request, taken);
    },
    true);
}

void PostgresStore::find_queue(const std::string& name,
                               std::function<void(const std::optional<Error>&)> then, bool created)
{
  if (m_queue && !m_queue->table.empty()) {
    then(std::nullopt);
    return;
  }
  session(name).query(
    find_fence_table_sql("dlock_queue"), {},
    [this, name, then, created](Answer& a) {
      if (a.error) {
        then(a.error);
        return;
      }
      try {
        m_queue = fence_table_from(a.rows, m_params.shown);
      } catch (const Error& error) {
        then(error);
        return;
      }
      if (!m_queue->table.empty()) {
        then(std::nullopt);
        return;
      }
      if (created || m_queue->home.empty()) {
        then(Error(ExitCode::config, "no schema of the search path to create it in"));
        return;
      }
      session(name).query(
        create_queue_table_sql(m_queue->home), {},
        [this, name, then](Answer& made) {
          if (made.error && !made_meanwhile(made.sqlstate)) {
            then(made.error);
            return;
          }
          m_queue.reset();
          find_queue(name, then, true);
        },
        true);
    },
    true);
}

void PostgresStore::try_fair(const std::string& name, const lock::AcquireRequest& request)
{
  // the dead waiters' rows go (every lock's: none is left behind), then the ticket ahead
  Held& held = held_of(name);
  session(name).query(
    fmt::format(
      "WITH gone AS (DELETE FROM {0} q WHERE NOT {1} AND q.ticket <> $2::pg_catalog.int8 RETURNING q.ticket) "
      "SELECT (SELECT max(q.ticket) FROM {0} q WHERE q.lock_key = $1 AND q.ticket < "
      "$2::pg_catalog.int8 AND {1} AND q.ticket NOT IN (SELECT ticket FROM gone))",
      m_queue->table, live_ticket("q")),
    {std::to_string(key_of(name).key), std::to_string(*held.ticket)},
    [this, name, request](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      Held& mine = held_of(name);
      mine.ahead.reset();
      if (a.rows.count() == 1 && !a.rows.null(0, 0)) {
        mine.ahead = a.rows.number(0, 0);
      }
      if (!mine.ahead) { // the first in the queue: the lock itself
        session(name).query(
          "SELECT pg_try_advisory_lock($1)", {std::to_string(key_of(name).key)},
          [this, name, request](Answer& tried_lock) {
            if (tried_lock.error) {
              answer(Op::acquire, *tried_lock.error);
              return;
            }
            tried(name, request, tried_lock.rows.count() == 1 && tried_lock.rows.truth(0, 0));
          },
          true);
        return;
      }
      // earlier waiters go first: who holds it, if anyone
      session(name).query(
        holders_sql(key_rows), key_params(key_of(name)),
        [this, name, request](Answer& rows) {
          if (rows.error) {
            answer(Op::acquire, *rows.error);
            return;
          }
          Holders holders = read_holders(rows.rows);
          if (!holders.granted.empty()) {
            holders_found(name, request, &holders.granted.front(),
                          std::int64_t(holders.granted.size()), holders.sessions.front());
            return;
          }
          Outcome outcome = Outcome::of(Op::acquire);
          outcome.acquire.lease = lock::AcquireResult::Lease::fair_queue;
          Millis cap =
            request.ticket.max_block > Millis(0) ? request.ticket.max_block : Millis(30'000);
          outcome.acquire.block = std::min(cap, Millis(30'000));
          answer(std::move(outcome));
        },
        true);
    },
    true);
}

void PostgresStore::leave_queue(const std::string& name, std::function<void()> then)
{
  Held& held = held_of(name);
  if (!held.ticket || !m_queue || m_queue->table.empty()) {
    then();
    return;
  }
  std::int64_t ticket = *held.ticket;
  held.ticket.reset();
  held.ahead.reset();
  session(name).query(
    fmt::format("WITH gone AS (DELETE FROM {} WHERE ticket = $1::pg_catalog.int8) SELECT "
                "pg_catalog.pg_advisory_unlock({}, {})",
                m_queue->table, fair_class, ticket_arg(ticket)),
    {std::to_string(ticket)}, [then](Answer&) { then(); }, true);
}

void PostgresStore::after_taken(const std::string& name, std::function<void()> then)
{
  if (held_of(name).ticket) {
    leave_queue(name, [this, name, then] {
      held_of(name).ticket.reset();
      after_taken(name, then);
    });
    return;
  }
  if (m_named.at(name).kind.mode == lock::LockKind::Mode::limit) {
    then(); // the kinds were checked before the slot was taken
    return;
  }
  // taken first, then looked at: a semaphore holder that takes its marker meanwhile sees it
  auto looked = [this, name, then](Answer& a) {
    if (a.error) {
      give_back(name, *a.error);
      return;
    }
    for (int i = 0; i < a.rows.count(); ++i) {
      if (std::optional<int> n = Semaphore::limit_of_marker(a.rows.number(i, 0))) {
        m_prefetched.reset();
        Outcome outcome = Outcome::of(Op::acquire);
        outcome.acquire.kind_in_use = lock::LockKind::semaphore(*n);
        m_named.at(name).held = false;
        let_go(name);
        answer(std::move(outcome));
        return;
      }
    }
    then();
  };
  if (m_prefetched && m_prefetched->name == name && m_prefetched->markers) {
    Answer a{.rows = *m_prefetched->markers}; // read with the try (try_lock)
    m_prefetched->markers.reset();
    looked(a);
    return;
  }
  session(name).query(markers_sql(), key_params(key_of(name)), looked, true);
}

void PostgresStore::try_semaphore(const std::string& name, const lock::AcquireRequest& request)
{
  Held& held = held_of(name);
  if (held.marker) {
    try_slot(name, request);
    return;
  }
  Semaphore sem = semaphore_of(m_named.at(name).prefixed, request.kind);
  session(name).query(
    "SELECT pg_catalog.pg_try_advisory_lock_shared($1::int4, $2::int4)",
    {std::to_string(sem.class_arg()), std::to_string(sem.marker_arg())},
    [this, name, request](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      if (a.rows.count() != 1 || !a.rows.truth(0, 0)) { // held exclusive: not dlock's
        report_slots(name, request);
        return;
      }
      held_of(name).marker = true;
      // marker taken first, then looked at: an exclusive or shared holder taking the key
      // meanwhile sees the marker
      session(name).query(
        "SELECT l.objsubid, l.mode, " + Semaphore::offset_sql("l.objid")
          + " FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND "
            "l.classid = $1::oid AND ((l.objsubid = 1 AND l.objid = $2::oid) OR ("
          + marker_rows() + "))",
        key_params(key_of(name)),
        [this, name, request](Answer& kinds) {
          if (kinds.error) {
            answer(Op::acquire, *kinds.error);
            return;
          }
          for (int i = 0; i < kinds.rows.count(); ++i) {
            if (kinds.rows.number(i, 0) == 1) {
              refuse_kind(name, kinds.rows.text(i, 1) == "ShareLock" ? lock::LockKind::shared()
                                                                     : lock::LockKind::exclusive());
              return;
            }
            std::optional<int> n = Semaphore::limit_of_marker(kinds.rows.number(i, 2));
            if (n && *n != request.kind.limit) {
              refuse_kind(name, lock::LockKind::semaphore(*n));
              return;
            }
          }
          try_slot(name, request);
        },
        true);
    },
    true);
}

void PostgresStore::try_slot(const std::string& name, const lock::AcquireRequest& request)
{
  // the first free slot (the filter stops at the first lock it gets)
  Semaphore sem = semaphore_of(m_named.at(name).prefixed, request.kind);
  std::vector<std::string> params{std::to_string(sem.class_arg()), std::to_string(sem.key.objid()),
                                  std::to_string(request.kind.limit)};
  session(name).query(
    "SELECT i FROM pg_catalog.generate_series(0, $3::int4 - 1) i WHERE "
    "pg_catalog.pg_try_advisory_lock($1::int4, "
      + Semaphore::slot_arg_sql("i") + ") LIMIT 1",
    params,
    [this, name, request](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      if (a.rows.count() == 1) {
        held_of(name).slot = int(a.rows.number(0, 0));
      }
      tried(name, request, a.rows.count() == 1);
    },
    true);
}

void PostgresStore::report_slots(const std::string& name, const lock::AcquireRequest& request)
{
  session(name).query(
    holders_sql(slot_rows()), key_params(key_of(name)),
    [this, name, request](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      Holders holders = read_holders(a.rows);
      holders_found(name, request, holders.granted.empty() ? nullptr : &holders.granted.front(),
                    std::int64_t(holders.granted.size()));
    },
    true);
}

void PostgresStore::refuse_kind(const std::string& name, lock::LockKind kind)
{
  m_named.at(name).held = false;
  let_go(name);
  Outcome outcome = Outcome::of(Op::acquire);
  outcome.acquire.kind_in_use = kind;
  answer(std::move(outcome));
}

std::string PostgresStore::unlock_semaphore_sql(const std::string& name)
{
  Held& held = held_of(name);
  Semaphore sem = semaphore_of(m_named.at(name).prefixed, m_named.at(name).kind);
  std::string sql = "SELECT ";
  sql += held.slot ? fmt::format("pg_catalog.pg_advisory_unlock({}, {})", sem.class_arg(),
                                 sem.slot_arg(*held.slot))
                   : std::string("false");
  if (held.marker) {
    sql += fmt::format(", pg_catalog.pg_advisory_unlock_shared({}, {})", sem.class_arg(),
                       sem.marker_arg());
  }
  held = Held{};
  return sql;
}

void PostgresStore::take_fence(const std::string& name, bool looked_again)
{
  Named& n = m_named.at(name);
  AdvisoryKey key = AdvisoryKey::of(n.prefixed);
  auto failed = [this, name](const Error& error) { give_back(name, error); };
  if (!m_fence) { // a lock held already when the table was looked for (a retry)
    find_fence(
      session(name), [this, name, looked_again] { fence(name, looked_again); }, failed);
    return;
  }
  if (m_fence->table.empty()) {
    if (looked_again) {
      without_fence(name, "the table dlock_fence cannot be found after it was created or dropped");
      return;
    }
    if (m_fence->home.empty()) {
      without_fence(name, "no schema of the search path to create the table dlock_fence in");
      return;
    }
    // No table yet: make it where the role's path puts new tables, then look again (whoever
    // made it meanwhile, its owner is checked).
    session(name).query(
      create_fence_table_sql(m_fence->home), {},
      [this, name, failed](Answer& created) {
        if (created.error && !made_meanwhile(created.sqlstate)) {
          without_fence(
            name, fmt::format("cannot create the table dlock_fence ({})", created.error->what()));
          return;
        }
        m_fence.reset();
        find_fence(
          session(name), [this, name] { fence(name, true); }, failed);
      },
      true);
    return;
  }
  auto taken = [this, name, key, looked_again, failed](Answer& a) {
    if (a.error && a.sqlstate == "42P01" && !looked_again) { // dropped since: look again
      m_fence.reset();
      find_fence(
        session(name), [this, name] { fence(name, true); }, failed);
      return;
    }
    if (a.error && (a.sqlstate == "42501" || a.sqlstate == "25006" || a.sqlstate == "42P01")) {
      without_fence(name, a.error->what());
      return;
    }
    if (a.error) {
      answer(Op::acquire, *a.error);
      return;
    }
    if (a.rows.count() == 0) { // the key is another name's
      give_back(name, Error(ExitCode::internal,
                            "lock name '{}' has the same PostgreSQL advisory key ({}) as "
                            "another name in dlock_fence; choose another name or --prefix",
                            name, key.key));
      return;
    }
    m_unflushed.erase(name); // flushed with the token
    fenced(name, a.rows.number(0, 0));
  };
  if (auto with_claim = m_fenced_with_claim.find(name); with_claim != m_fenced_with_claim.end()) {
    Answer a = std::move(with_claim->second); // taken with the holder's record (write_policy)
    m_fenced_with_claim.erase(with_claim);
    taken(a);
    return;
  }
  session(name).query(fence_sql(), {std::to_string(key.key), n.prefixed}, taken, true);
}

std::string PostgresStore::fence_sql() const
{
  return "INSERT INTO " + m_fence->table
         + " AS f (lock_key, name, fence, acquired_at) "
           "VALUES ($1, $2, 1, pg_catalog.clock_timestamp()) ON CONFLICT (lock_key) DO UPDATE "
           "SET fence = f.fence + 1, acquired_at = EXCLUDED.acquired_at WHERE f.name = "
           "EXCLUDED.name RETURNING fence";
}

void PostgresStore::without_fence(const std::string& name, const std::string& why)
{
  auto unflushed = m_unflushed.find(name);
  if (unflushed == m_unflushed.end()) {
    no_fencing(name, why);
    return;
  }
  // the holder's record was written asynchronously: written again, synchronously (which
  // flushes the WAL up to it), before the lock is answered
  PolicyWrite claim = unflushed->second;
  m_unflushed.erase(unflushed);
  m_fencing = false;
  write_policy(name, false, claim,
               [this, name, why](const std::optional<Error>& error, std::int64_t) {
                 if (error) {
                   give_back(name, *error);
                   return;
                 }
                 no_fencing(name, why);
               });
}

void PostgresStore::give_back(const std::string& name, const Error& error)
{
  m_named.at(name).held = false;
  let_go(name);
  answer(Op::acquire, error);
}

void PostgresStore::report_holder(const std::string& name, const lock::AcquireRequest& request)
{
  session(name).query(
    holders_sql(key_rows), key_params(key_of(name)),
    [this, name, request](Answer& a) {
      if (a.error) {
        answer(Op::acquire, *a.error);
        return;
      }
      Holders holders = read_holders(a.rows);
      bool one = holders.granted.size() == 1 && !holders.shared;
      holders_found(name, request, holders.granted.empty() ? nullptr : &holders.granted.front(),
                    std::int64_t(holders.granted.size()), one ? holders.sessions.front() : 0);
    },
    true);
}

void PostgresStore::wait_in_server(const std::string& name, Millis block)
{
  const Named& n = m_named.at(name);
  if (n.kind.mode == lock::LockKind::Mode::limit) {
    // blocks on one slot, a different one each time: its holder's end grants it at once
    Semaphore sem = semaphore_of(n.prefixed, n.kind);
    Held& held = held_of(name);
    int slot = held.turn++ % n.kind.limit;
    session(name).query_blocking(
      fmt::format("SELECT pg_catalog.pg_advisory_lock({}, {}) FROM {}", sem.class_arg(),
                  sem.slot_arg(slot),
                  lock_timeout_sql(std::max<std::int64_t>(1, std::min(block, slot_block).count()))),
      [this, name, slot](Answer& a) {
        if (!a.error) {
          held_of(name).slot = slot;
          granted(name);
          woken();
        } else if (a.sqlstate != "55P03" && a.sqlstate != "57014") {
          woken(a.error);
        } else {
          woken();
        }
      });
    return;
  }
  // Blocks until the holder lets go (the server grants it to this session then) or
  // lock_timeout ends the wait (55P03).
  if (std::optional<std::int64_t> ahead = held_of(name).ahead) {
    // a --fair waiter behind another: woken when that one leaves the queue (it took the lock,
    // gave up, or its session ended); the ticket lock it gets is let go at once
    session(name).query_blocking(
      fmt::format("SELECT pg_catalog.pg_advisory_lock({}, {}) FROM {}; SELECT "
                  "pg_catalog.pg_advisory_unlock({}, {})",
                  fair_class, ticket_arg(*ahead),
                  lock_timeout_sql(std::max<std::int64_t>(1, block.count())), fair_class,
                  ticket_arg(*ahead)),
      [this](Answer& a) {
        woken(a.error && a.sqlstate != "55P03" && a.sqlstate != "57014" ? a.error : std::nullopt);
      });
    return;
  }
  // once granted, the side record that check_policy reads next, in the same round trip
  AdvisoryKey key = AdvisoryKey::of(n.prefixed);
  std::string sql =
    fmt::format("SELECT pg_advisory_lock{}({}) FROM {}",
                n.kind.mode == lock::LockKind::Mode::shared ? "_shared" : "", key.key,
                lock_timeout_sql(std::max<std::int64_t>(1, block.count())));
  adopt_found_policy();
  bool policy = !m_no_policy && m_policy && !m_policy->table.empty();
  if (policy) {
    sql += "; " + policy_read_sql(std::to_string(key.key));
  }
  session(name).query_blocking(sql, [this, name, policy](Answer& a) {
    if (!a.results.empty()) { // granted (a read after it that failed is asked again)
      m_prefetched.reset();
      if (policy && a.results.size() > 1) {
        m_prefetched = Prefetched{.name = name, .policy = Answer{.rows = a.results[1]}};
      }
      granted(name);
      leave_queue(name, [this] { woken(); });
    } else if (a.sqlstate != "55P03" && a.sqlstate != "57014") {
      woken(a.error); // not a lock or statement timeout
    } else {
      woken();
    }
  });
}

void PostgresStore::confirm_held(const std::string& name)
{
  const Named& n = m_named.at(name);
  if (n.kind.mode == lock::LockKind::Mode::limit) {
    std::optional<int> slot = held_of(name).slot;
    Semaphore sem = semaphore_of(n.prefixed, n.kind);
    session(name).query(
      "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l WHERE l.pid = "
      "pg_catalog.pg_backend_pid() AND l.locktype = 'advisory' AND l.objsubid = 2 AND "
      "l.classid = $1::oid AND l.objid = $2::oid AND l.granted)",
      {std::to_string(sem.key.classid()),
       std::to_string(std::uint32_t(sem.slot_arg(slot.value_or(-1))))},
      [this, name, slot](Answer& a) {
        held_confirmed(name, a.error, slot && a.rows.count() == 1 && a.rows.truth(0, 0));
      });
    return;
  }
  session(name).query(
    std::string("SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = pg_backend_pid() AND ")
      + key_rows + " AND l.granted)",
    key_params(key_of(name)), [this, name](Answer& a) {
      held_confirmed(name, a.error, a.rows.count() == 1 && a.rows.truth(0, 0));
    });
}

void PostgresStore::confirm_other(const lock::LockName& name, const std::string& token)
{
  // Its session's application_name carries the token's fingerprint.
  AdvisoryKey key = AdvisoryKey::of(m_prefix + name.str());
  std::vector<std::string> params = key_params(key);
  params.push_back("dlock " + token_fingerprint(token) + " %");
  control().query(
    std::string("SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON "
                "a.pid = l.pid WHERE ((")
      + key_rows + ") OR (" + slot_rows() + ")) AND l.granted AND a.application_name LIKE $3)",
    params,
    [this](Answer& a) { other_confirmed(a.error, a.rows.count() == 1 && a.rows.truth(0, 0)); });
}

void PostgresStore::unlock(const std::string& name)
{
  const Named& n = m_named.at(name);
  if (n.kind.mode == lock::LockKind::Mode::limit) {
    session(name).query(unlock_semaphore_sql(name), {}, [this, name](Answer& a) {
      released(name, a.error, a.sqlstate.empty(), a.rows.count() == 1 && a.rows.truth(0, 0));
    });
  } else {
    session(name).query(fmt::format("SELECT pg_advisory_unlock{}($1)",
                                    n.kind.mode == lock::LockKind::Mode::shared ? "_shared" : ""),
                        {std::to_string(AdvisoryKey::of(n.prefixed).key)}, [this, name](Answer& a) {
                          released(name, a.error, a.sqlstate.empty(),
                                   a.rows.count() == 1 && a.rows.truth(0, 0));
                        });
  }
  // then the sweep (write_policy), which no answer waits for
  if (auto sweep = m_sweeps.find(name); sweep != m_sweeps.end()) {
    session(name).query(sweep->second.first, sweep->second.second, nullptr);
    m_sweeps.erase(sweep);
  }
}

void PostgresStore::end_holder(const lock::LockName& name, const std::string& token)
{
  AdvisoryKey key = AdvisoryKey::of(m_prefix + name.str());
  std::vector<std::string> params = key_params(key);
  std::string sql = std::string("SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN "
                                "pg_stat_activity a ON a.pid = l.pid WHERE ((")
                    + key_rows + ") OR (" + slot_rows() + ")) AND l.granted";
  if (!token.empty()) {
    sql += " AND a.application_name LIKE $3";
    params.push_back("dlock " + token_fingerprint(token) + " %");
  }
  control().query(sql, params, [this, name, token](Answer& a) {
    Outcome outcome = Outcome::of(Op::release, a.error);
    if (a.error && a.sqlstate == "42501") {
      outcome.error = Error(ExitCode::auth,
                            "release --force on PostgreSQL ends the holder's session, which needs "
                            "the pg_signal_backend role or superuser: {}",
                            a.error->what());
    }
    outcome.held = !a.error && a.rows.count() > 0;
    holder_ended(name, token, std::move(outcome));
  });
}

void PostgresStore::let_go(const std::string& name)
{
  const Named& n = m_named.at(name);
  if (n.kind.mode == lock::LockKind::Mode::limit) {
    session(name).query(unlock_semaphore_sql(name), {}, nullptr, true);
    return;
  }
  session(name).query(fmt::format("SELECT pg_advisory_unlock{}($1)",
                                  n.kind.mode == lock::LockKind::Mode::shared ? "_shared" : ""),
                      {std::to_string(AdvisoryKey::of(n.prefixed).key)}, nullptr, true);
}

Session& PostgresStore::policy_session(const std::string& name, bool control_session)
{
  return control_session ? control() : session(name);
}

void PostgresStore::read_policy(const std::string& name, bool control_session, bool create,
                                PolicyThen then)
{
  std::optional<Prefetched> prefetched = std::move(m_prefetched);
  m_prefetched.reset(); // good for the read right after the lock is taken only
  if (prefetched && prefetched->policy && prefetched->name == name && !control_session && create
      && m_policy && !m_policy->table.empty()) {
    policy_read(name, control_session, create, then, *prefetched->policy);
    return;
  }
  if (m_policy) {
    select_policy(name, control_session, create, std::move(then));
    return;
  }
  find_policy(name, control_session, create, std::move(then));
}

void PostgresStore::find_policy(const std::string& name, bool control_session, bool create,
                                PolicyThen then)
{
  auto found = [this, name, control_session, create, then](Answer& a) {
    if (a.error) {
      then(PolicyRead{.error = a.error});
      return;
    }
    try {
      m_policy = fence_table_from(a.rows, m_params.shown);
    } catch (const Error& error) {
      then(PolicyRead{.unavailable = error});
      return;
    }
    if (!m_policy->table.empty() || !create) {
      select_policy(name, control_session, false, then);
      return;
    }
    if (m_policy->home.empty()) {
      then(PolicyRead{.unavailable =
                        Error(ExitCode::config, "no schema of the search path to create it in")});
      return;
    }
    policy_session(name, control_session)
      .query(
        create_policy_table_sql(m_policy->home), {},
        [this, name, control_session, then](Answer& created) {
          if (created.error && !made_meanwhile(created.sqlstate)) {
            then(PolicyRead{.unavailable = created.error});
            return;
          }
          m_policy.reset();
          find_policy(name, control_session, false, then);
        },
        true);
  };
  if (m_found_policy) { // read with the session's limits (read_limit)
    Answer a{.rows = *m_found_policy};
    m_found_policy.reset();
    found(a);
    return;
  }
  policy_session(name, control_session)
    .query(find_fence_table_sql("dlock_policy"), {}, found, true);
}

void PostgresStore::adopt_found_policy()
{
  if (m_policy || !m_found_policy) {
    return;
  }
  try {
    FenceTable found = fence_table_from(*m_found_policy, m_params.shown);
    if (!found.table.empty()) {
      m_policy = found;
      m_found_policy.reset();
    }
  } catch (const Error&) {
    // not trusted: find_policy says so in its turn
  }
}

std::string PostgresStore::policy_read_sql(const std::string& key) const
{
  return fmt::format("SELECT {}, p.lock_key IS NOT NULL, {} FROM (SELECT 1) one LEFT JOIN {} p "
                     "ON p.lock_key = {}",
                     now_ms_sql(), policy_columns(), m_policy->table, key);
}

void PostgresStore::select_policy(const std::string& name, bool control_session, bool create,
                                  PolicyThen then)
{
  if (m_policy->table.empty()) {
    // none (create was false): no record closes the lock
    policy_session(name, control_session)
      .query(
        "SELECT " + now_ms_sql(), {},
        [then](Answer& a) {
          PolicyRead read{.error = a.error};
          if (!a.error && a.rows.count() == 1) {
            read.now = a.rows.number(0, 0);
          }
          then(std::move(read));
        },
        true);
    return;
  }
  AdvisoryKey key = AdvisoryKey::of(m_prefix + name);
  policy_session(name, control_session)
    .query(
      policy_read_sql("$1"), {std::to_string(key.key)},
      [this, name, control_session, create, then](Answer& a) {
        policy_read(name, control_session, create, then, a);
      },
      true);
}

void PostgresStore::policy_read(const std::string& name, bool control_session, bool create,
                                const PolicyThen& then, const Answer& a)
{
  if (a.error && a.sqlstate == "42P01") { // dropped since: look again
    m_policy.reset();
    if (create) {
      find_policy(name, control_session, false, then);
    } else {
      then(PolicyRead{});
    }
    return;
  }
  if (a.error && a.sqlstate == "42501") {
    then(PolicyRead{.unavailable = a.error});
    return;
  }
  if (a.error || a.rows.count() != 1) {
    then(PolicyRead{.error = a.error});
    return;
  }
  PolicyRead read;
  read.now = a.rows.number(0, 0);
  if (a.rows.truth(0, 1)) {
    read.row = sql::policy_row(a.rows, 0, 2);
  }
  then(std::move(read));
}

void PostgresStore::write_policy(const std::string& name, bool control_session,
                                 const PolicyWrite& write, WriteThen then)
{
  write_record(name, control_session, write, std::move(then), true);
}

void PostgresStore::write_record(const std::string& name, bool control_session,
                                 const PolicyWrite& write, WriteThen then, bool with_fence)
{
  auto done = [then](Answer& a) {
    if (then) {
      then(a.error, a.error ? 0 : std::int64_t(a.rows.count()));
    }
  };
  if (!m_policy || m_policy->table.empty()) {
    Answer none;
    done(none);
    return;
  }
  const std::string& table = m_policy->table;
  std::string key = std::to_string(AdvisoryKey::of(m_prefix + name).key);
  std::string sql;
  std::string sql_sync; // a claim's, committed synchronously
  std::vector<std::string> params{key};
  bool async = false;
  using Kind = PolicyWrite::Kind;
  switch (write.kind) {
  case Kind::claim:
  case Kind::force:
    // a claim is flushed by the fencing token's synchronous write that follows, or by
    // flush_claim when none does
    async = write.kind == Kind::claim && m_fencing;
    if (write.kind == Kind::force && write.delay_ms <= 0) {
      sql = "DELETE FROM " + table + " WHERE lock_key = $1";
      break;
    }
    // force: an armed lock-delay, counted from when the holder ended (now, if not known yet)
    sql = "INSERT INTO " + table
          + " AS p (lock_key, name, token_fp, session_id, holder, hold_until, released, "
            "delay_ms, ended_at, replace_by) VALUES ($1, $2, $3, "
          + (write.kind == Kind::claim ? "pg_catalog.pg_backend_pid()" : "0")
          + ", $4, $5::pg_catalog.int8, false, $6::pg_catalog.int8, "
          + (write.kind == Kind::claim ? std::string("0")
             : write.ended_at > 0      ? std::to_string(write.ended_at)
                                       : now_ms_sql())
          + "@replace_by@"
          + " ON CONFLICT (lock_key) DO UPDATE SET name = EXCLUDED.name, "
            "token_fp = EXCLUDED.token_fp, session_id = EXCLUDED.session_id, "
            "holder = EXCLUDED.holder, hold_until = EXCLUDED.hold_until, released = false, "
            "delay_ms = EXCLUDED.delay_ms, ended_at = EXCLUDED.ended_at, replace_by = ''";
    params.insert(params.end(), {m_prefix + name, write.token_fp, write.holder,
                                 std::to_string(write.hold_until), std::to_string(write.delay_ms)});
    sql_sync = with_replace_by(sql, ", '')");
    sql = async ? with_replace_by(sql, fmt::format(", CASE WHEN {} THEN '' END)", async_commit))
                : sql_sync;
    break;
  case Kind::stamp:
    sql = "UPDATE " + table + " SET ended_at = " + now_ms_sql()
          + " WHERE lock_key = $1 AND token_fp = $2 AND ended_at = 0";
    params.push_back(write.token_fp);
    break;
  case Kind::keep:
    // lost in a crash: the record of a holder that did not release (a longer lock-delay)
    sql = "UPDATE " + table
          + " SET released = true, delay_ms = 0 WHERE lock_key = $1 AND token_fp = $2 AND "
          + async_commit;
    params.push_back(write.token_fp);
    break;
  case Kind::drop:
    // the newest --supersede waiter's record stays while it lasts; lost in a crash: as keep
    sql = "WITH gone AS (DELETE FROM " + table
          + " WHERE lock_key = $1 AND token_fp = $2 AND (newest_waiter = '' OR newest_until < "
          + now_ms_sql() + ") AND " + async_commit + " RETURNING 1) UPDATE " + table
          + " SET token_fp = '', session_id = 0, holder = '', hold_until = 0, released = false, "
            "delay_ms = 0, ended_at = 0, replace_by = '' WHERE lock_key = $1 AND token_fp = $2 "
            "AND NOT (newest_waiter = '' OR newest_until < "
          + now_ms_sql() + ") AND " + async_commit;
    params.push_back(write.token_fp);
    break;
  case Kind::sweep:
    // free (no session holds its advisory key), no min-hold, no lock-delay still counting
    // (an unstamped one waits for the next acquirer), no supersede waiter
    sql = "DELETE FROM " + table + " p WHERE p.lock_key <> $1 AND p.hold_until < " + now_ms_sql()
          + " AND (p.released OR p.delay_ms <= 0 OR p.replace_by <> '' OR (p.ended_at > 0 AND "
            "p.ended_at < "
          + now_ms_sql() + " - p.delay_ms)) AND p.newest_until < " + now_ms_sql()
          + " AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' "
            "AND l.objsubid = 1 AND ((l.classid::pg_catalog.int8 << 32) | "
            "l.objid::pg_catalog.int8) = p.lock_key) AND "
          + async_commit; // lost in a crash: rows the next sweep takes
    break;
  case Kind::newest:
    sql = "INSERT INTO " + table
          + " AS p (lock_key, name, token_fp, session_id, holder, hold_until, released, "
            "delay_ms, ended_at, replace_by, newest_waiter, newest, newest_until) VALUES ($1, $2, "
            "'', 0, '', 0, false, 0, 0, '', $3, $4, "
          + now_ms_sql()
          + " + $5::pg_catalog.int8) ON CONFLICT (lock_key) DO UPDATE SET newest_waiter = "
            "EXCLUDED.newest_waiter, newest = EXCLUDED.newest, newest_until = "
            "EXCLUDED.newest_until";
    params.insert(params.end(),
                  {m_prefix + name, write.waiter, write.holder, std::to_string(write.lifetime_ms)});
    break;
  case Kind::replace:
    sql = "UPDATE " + table
          + " SET replace_by = $3 WHERE lock_key = $1 AND token_fp = $2 AND session_id = "
            "$4::pg_catalog.int8 AND NOT released RETURNING 1";
    params.insert(params.end(), {write.token_fp, write.holder, std::to_string(write.session)});
    break;
  }
  if (write.kind == Kind::sweep) {
    // sent after the unlock that follows it (unlock): the next holder need not wait for it
    m_sweeps[name] = {sql, params};
    Answer later;
    done(later);
    return;
  }
  if (write.kind == Kind::claim) {
    m_unflushed.erase(name);
  }
  m_fenced_with_claim.erase(name);
  if (async && with_fence && m_fence && !m_fence->table.empty()) {
    // One statement, one transaction: the record, then the fencing token (its synchronous
    // commit makes both durable), answered to take_fence; if it fails, each goes alone, as
    // below, where its error is handled.
    std::string both = "WITH claim AS (" + sql_sync + " RETURNING 1) " + fence_sql()
                       + ", (SELECT count(*) FROM claim)";
    policy_session(name, control_session)
      .query(
        both, params,
        [this, name, control_session, write, then](Answer& a) {
          if (a.error || a.rows.count() > 1) {
            write_record(name, control_session, write, then, false);
            return;
          }
          m_fenced_with_claim[name] = a;
          if (then) {
            then(std::nullopt, 1);
          }
        },
        true);
    return;
  }
  if (async) {
    policy_session(name, control_session)
      .query(
        sql, params,
        [this, name, write, done](Answer& a) {
          if (!a.error) {
            m_unflushed[name] = write;
          }
          done(a);
        },
        true);
    return;
  }
  policy_session(name, control_session).query(sql, params, done, true);
}

sql::HistorySql PostgresStore::history_sql() const
{
  return sql::HistorySql{.table = m_history->table,
                         .key = "$1::pg_catalog.int8",
                         .name = "$2::pg_catalog.text",
                         .now_ms = now_ms_sql()};
}

void PostgresStore::find_history(const std::string& name, bool control_session, bool create,
                                 std::function<void(const std::optional<Error>&)> then,
                                 bool created)
{
  if (m_history && (!m_history->table.empty() || !create)) {
    then(std::nullopt);
    return;
  }
  auto found = [this, name, control_session, create, then, created](Answer& a) {
    if (a.error) {
      then(a.error);
      return;
    }
    try {
      m_history = fence_table_from(a.rows, m_params.shown);
    } catch (const Error& error) { // another role's: its triggers would run as dlock's
      m_no_history = error;
      then(error);
      return;
    }
    if (!m_history->table.empty() || !create) {
      then(std::nullopt);
      return;
    }
    if (created || m_history->home.empty()) {
      m_no_history = Error(ExitCode::config,
                           "PostgreSQL at {}: no schema of the search path "
                           "to create the table dlock_history in",
                           m_params.shown);
      then(m_no_history);
      return;
    }
    policy_session(name, control_session)
      .query(
        create_history_table_sql(m_history->home), {},
        [this, name, control_session, then](Answer& made) {
          if (made.error && !made_meanwhile(made.sqlstate)) {
            m_no_history = Error(made.error->code(), "cannot create the table dlock_history: {}",
                                 made.error->what());
            then(m_no_history);
            return;
          }
          m_history.reset();
          find_history(name, control_session, true, then, true);
        },
        true);
  };
  if (m_found_history && !created) { // read with the try (try_lock)
    Answer a{.rows = *m_found_history};
    m_found_history.reset();
    found(a);
    return;
  }
  policy_session(name, control_session)
    .query(find_fence_table_sql("dlock_history"), {}, found, true);
}

void PostgresStore::write_history(const std::string& name, bool control_session,
                                  const std::string& text, RecordThen then)
{
  write_history(name, control_session, text, std::move(then), false);
}

void PostgresStore::write_history(const std::string& name, bool control_session,
                                  const std::string& text, RecordThen then, bool retried)
{
  find_history(
    name, control_session, true,
    [this, name, control_session, text, then, retried](const std::optional<Error>& error) {
      if (error) {
        then(error);
        return;
      }
      sql::HistorySql words = history_sql();
      // the rows this statement sees are those before its insert: one fewer is kept
      std::string sql = fmt::format(
        "WITH added AS (INSERT INTO {0} ({1}) SELECT {2}, {3}, {4}, "
        "$3::pg_catalog.text WHERE {5} RETURNING 1), trimmed AS ({6}), expired AS "
        "({7}) SELECT pg_catalog.count(*) FROM added",
        words.table, sql::history_columns, words.key, words.name, words.now_ms, async_commit,
        sql::history_trim_sql(words, lock::max_history_events - 1), sql::history_expire_sql(words));
      policy_session(name, control_session)
        .query(
          sql, {std::to_string(AdvisoryKey::of(m_prefix + name).key), m_prefix + name, text},
          [this, name, control_session, text, then, retried](Answer& a) {
            if (a.error && a.sqlstate == "40P01" && !retried) {
              // the victim of a deadlock with another holder's record of the same lock (a
              // hand-over writes two at once), rolled back whole: once more
              write_history(name, control_session, text, then, true);
              return;
            }
            if (a.error && a.sqlstate == "42P01") { // dropped since: look again next time
              m_history.reset();
            } else if (a.error && (a.sqlstate == "42501" || a.sqlstate == "25006")) {
              m_no_history = a.error; // no right to write it, or a read-only server
            }
            then(a.error);
          },
          true);
    });
}

void PostgresStore::read_history(const std::string& name, std::size_t limit,
                                 std::function<void(HistoryRead)> then)
{
  find_history(name, true, false, [this, name, limit, then](const std::optional<Error>& error) {
    if (error) {
      then(HistoryRead{.error = error, .refused = error->code() == ExitCode::config});
      return;
    }
    if (m_history->table.empty()) {
      then(HistoryRead{}); // none yet: no events
      return;
    }
    control().query(
      sql::history_read_sql(
        history_sql(), fmt::format("left(event::pg_catalog.text, {})", sql::history_read_bytes),
        limit),
      {std::to_string(AdvisoryKey::of(m_prefix + name).key), m_prefix + name},
      [then](Answer& a) {
        HistoryRead read{.error = a.error};
        for (int i = 0; !a.error && i < a.rows.count(); ++i) {
          if (!a.rows.null(i, 0)) {
            read.texts.push_back(a.rows.text(i, 0));
          }
        }
        then(std::move(read));
      },
      true);
  });
}

std::vector<sql::SqlStore::NamedPolicy> PostgresStore::list_policies(util::TimePoint deadline,
                                                                     std::int64_t& now)
{
  if (!m_policy) {
    Answer found = ask(find_fence_table_sql("dlock_policy"), {}, deadline);
    if (found.error) {
      throw *found.error;
    }
    m_policy = fence_table_from(found.rows, m_params.shown);
  }
  if (m_policy->table.empty()) {
    return {};
  }
  // Names longer than a lock name (another tenant's rows) are left out, not read.
  Answer rows = ask(fmt::format("SELECT {}, p.name, {} FROM {} p WHERE left(p.name, length($1)) "
                                "= $1 AND octet_length(p.name) <= octet_length($1) + $2 "
                                "ORDER BY p.name",
                                now_ms_sql(), policy_columns(), m_policy->table),
                    {m_prefix, std::to_string(lock::max_name_bytes)}, deadline);
  if (rows.error && control().broken()) {
    throw *rows.error;
  }
  if (rows.error) { // none, or another tenant's table of other columns
    util::log_verbose("no side records listed: {}", rows.error->what());
    return {};
  }
  std::vector<NamedPolicy> found;
  for (int i = 0; i < rows.rows.count(); ++i) {
    now = rows.rows.number(i, 0);
    found.push_back(
      NamedPolicy{rows.rows.text(i, 1).substr(m_prefix.size()), sql::policy_row(rows.rows, i, 2)});
  }
  return found;
}

Answer PostgresStore::ask(const std::string& sql, std::vector<std::string> params,
                          util::TimePoint deadline)
{
  std::optional<Answer> got;
  control().query(sql, std::move(params), [&got](Answer& a) { got = std::move(a); });
  block_until([&got] { return got.has_value(); }, deadline);
  return std::move(*got);
}

std::string PostgresStore::fence_table(util::TimePoint deadline)
{
  if (!m_fence) {
    Answer found = ask(find_fence_table_sql(), {}, deadline);
    if (found.error) {
      throw *found.error;
    }
    m_fence = fence_table_from(found.rows, m_params.shown);
  }
  return m_fence->table;
}

void PostgresStore::semaphore_status(lock::LockStatus& status, AdvisoryKey key,
                                     util::TimePoint deadline)
{
  Answer rows = ask(holders_sql(slot_rows()), key_params(key), deadline);
  if (rows.error) {
    throw *rows.error;
  }
  Holders holders = read_holders(rows.rows);
  if (holders.granted.empty()) {
    return;
  }
  Answer markers = ask("SELECT " + Semaphore::offset_sql("l.objid")
                         + " FROM pg_catalog.pg_locks l WHERE " + marker_rows(),
                       key_params(key), deadline);
  if (markers.error) {
    throw *markers.error;
  }
  int limit = int(std::max<std::size_t>(2, holders.granted.size()));
  for (int i = 0; i < markers.rows.count(); ++i) {
    limit = std::max(limit, Semaphore::limit_of_marker(markers.rows.number(i, 0)).value_or(0));
  }
  status.held = true;
  status.kind = lock::LockKind::semaphore(limit);
  status.waiters += holders.waiting;
  status.holder = holders.granted.front();
  for (const lock::HolderInfo& holder : holders.granted) {
    status.slots.push_back(lock::SlotHolder{holder, -1});
  }
}

lock::LockStatus PostgresStore::status(const lock::LockName& name, util::TimePoint deadline)
{
  AdvisoryKey key = AdvisoryKey::of(m_prefix + name.str());
  // A side table found missing may be there by now (leader --watch reads status at each change,
  // on a database whose first lock came after it started): only a table found is remembered.
  if (m_fence && m_fence->table.empty()) {
    m_fence.reset();
  }
  if (m_policy && m_policy->table.empty()) {
    m_policy.reset();
  }
  lock::LockStatus status;
  status.name = name.str();
  status.ttl_ms = -1;
  Answer now = ask("SELECT " + now_ms_sql(), {}, deadline);
  if (now.error) {
    throw *now.error;
  }
  status.server_time_ms = now.rows.number(0, 0);
  Answer rows = ask(holders_sql(key_rows), key_params(key), deadline);
  if (rows.error) {
    throw *rows.error;
  }
  Holders holders = read_holders(rows.rows);
  status.waiters = holders.waiting;
  std::string table = fence_table(deadline);
  Answer fence;
  if (!table.empty()) {
    fence = ask("SELECT fence, " + acquired_ms_sql("acquired_at") + " FROM " + table
                  + " WHERE lock_key = $1",
                {std::to_string(key.key)}, deadline);
  }
  std::int64_t acquired_ms = 0;
  if (!fence.error && fence.rows.count() == 1) {
    status.last_fence = lock::parse_fence(fence.rows.text(0, 0));
    acquired_ms = fence.rows.number(0, 1);
  } else if (fence.error && fence.sqlstate != "42P01" && fence.sqlstate != "42501") {
    throw *fence.error;
  }
  if (holders.granted.empty()) {
    semaphore_status(status, key, deadline);
  }
  if (holders.granted.empty() && !status.held) {
    add_policy(status, 0, deadline);
    return status;
  }
  if (holders.granted.empty()) {
    return status;
  }
  status.held = true;
  status.holder = holders.granted.front();
  status.holder.fence = status.last_fence.value_or(0);
  status.holder.acquired_ms = acquired_ms;
  if (holders.shared) {
    status.kind = lock::LockKind::shared();
    for (const lock::HolderInfo& holder : holders.granted) {
      status.slots.push_back(lock::SlotHolder{holder, -1});
    }
  } else {
    add_policy(status, holders.sessions.front(), deadline);
  }
  return status;
}

std::vector<lock::LockStatus> PostgresStore::list(std::string_view pattern, Millis timeout)
{
  util::TimePoint deadline = util::deadline_after(timeout);
  // dlock_fence names the keys dlock took; locks taken without it (no right to create the
  // table) cannot be named, and are not listed.
  std::string table = fence_table(deadline);
  if (table.empty()) {
    util::log_verbose("no locks to list: there is no table dlock_fence");
    return {};
  }
  // Names longer than a lock name (another tenant's rows) are left out, not read.
  Answer rows = ask("SELECT f.name, l.pid, l.granted, l.mode, coalesce(a.application_name, ''), "
                    "coalesce(a.usename::text, ''), coalesce(host(a.client_addr), ''), f.fence, "
                      + acquired_ms_sql("f.acquired_at") + ", " + now_ms_sql()
                      + " FROM pg_locks l JOIN " + table
                      + " f ON f.lock_key = "
                        "((l.classid::bigint << 32) | l.objid::bigint) "
                        "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
                        "WHERE l.locktype = 'advisory' AND l.objsubid = 1 "
                        "AND left(f.name, length($1)) = $1 AND octet_length(f.name) <= "
                        "octet_length($1) + $2 ORDER BY f.name, l.granted DESC, a.backend_start",
                    {m_prefix, std::to_string(lock::max_name_bytes)}, deadline);
  if (rows.error && (rows.sqlstate == "42P01" || rows.sqlstate == "42501")) {
    util::log_verbose("no locks to list: {}", rows.error->what());
    return {};
  }
  if (rows.error) {
    throw *rows.error;
  }
  std::vector<lock::LockStatus> found;
  std::map<std::string, std::int64_t> sessions; // the holder's backend pid, by name
  const Rows& r = rows.rows;
  for (int i = 0; i < r.count(); ++i) {
    std::string name = r.text(i, 0).substr(m_prefix.size());
    if (found.empty() || found.back().name != name) {
      lock::LockStatus status;
      status.name = name;
      status.ttl_ms = -1;
      status.last_fence = lock::parse_fence(r.text(i, 7));
      status.server_time_ms = r.number(i, 9);
      found.push_back(std::move(status));
    }
    lock::LockStatus& status = found.back();
    if (!r.truth(i, 2)) {
      ++status.waiters;
      continue;
    }
    lock::HolderInfo holder =
      holder_of_session(r.text(i, 4), r.text(i, 5), r.text(i, 6), r.number(i, 1));
    if (!status.held) {
      status.held = true;
      sessions[name] = r.text(i, 3) == "ShareLock" ? 0 : r.number(i, 1);
      status.holder = holder;
      status.holder.fence = status.last_fence.value_or(0);
      status.holder.acquired_ms = r.number(i, 8);
    }
    if (r.text(i, 3) == "ShareLock") {
      status.kind = lock::LockKind::shared();
      status.slots.push_back(lock::SlotHolder{holder, -1});
    }
  }
  list_semaphores(found, table, deadline);
  std::string glob(pattern);
  std::erase_if(found, [&](const lock::LockStatus& status) {
    return !status.held || ::fnmatch(glob.c_str(), status.name.c_str(), 0) != 0;
  });
  add_policies(found, sessions, pattern, deadline);
  return found;
}

void PostgresStore::list_semaphores(std::vector<lock::LockStatus>& found, const std::string& table,
                                    util::TimePoint deadline)
{
  // the slot holders of every name of dlock_fence (semaphore.hpp), with the marker's N
  std::string offset = "((l.objid::pg_catalog.int8 - (f.lock_key & 4294967295) + 4294967296) % "
                       "4294967296)";
  std::string marker_offset = "((m.objid::pg_catalog.int8 - (f.lock_key & 4294967295) + "
                              "4294967296) % 4294967296)";
  Answer rows =
    ask("SELECT f.name, l.pid, l.granted, coalesce(a.application_name, ''), "
        "coalesce(a.usename::text, ''), coalesce(host(a.client_addr), ''), f.fence, "
          + now_ms_sql() + ", (SELECT max(4294967296 - " + marker_offset
          + ") FROM pg_catalog.pg_locks m WHERE m.locktype = 'advisory' AND m.objsubid = 2 AND "
            "m.classid = l.classid AND m.granted AND m.mode = 'ShareLock' AND "
          + marker_offset + " >= " + std::to_string((std::int64_t(1) << 32) - Semaphore::max_limit)
          + ") FROM pg_catalog.pg_locks l JOIN " + table
          + " f ON l.classid = ((f.lock_key >> 32) & 4294967295)::pg_catalog.oid AND " + offset
          + " BETWEEN 1 AND " + std::to_string(Semaphore::max_limit)
          + " LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND "
            "l.objsubid = 2 AND l.mode = 'ExclusiveLock' AND left(f.name, length($1)) = $1 AND "
            "octet_length(f.name) <= octet_length($1) + $2 ORDER BY f.name, l.granted DESC, "
            "a.backend_start",
        {m_prefix, std::to_string(lock::max_name_bytes)}, deadline);
  if (rows.error) {
    util::log_verbose("no semaphores listed: {}", rows.error->what());
    return;
  }
  const Rows& r = rows.rows;
  for (int i = 0; i < r.count(); ++i) {
    std::string name = r.text(i, 0).substr(m_prefix.size());
    auto status = std::find_if(found.begin(), found.end(),
                               [&name](const lock::LockStatus& one) { return one.name == name; });
    if (status == found.end()) {
      lock::LockStatus added;
      added.name = name;
      added.ttl_ms = -1;
      added.last_fence = lock::parse_fence(r.text(i, 6));
      added.server_time_ms = r.number(i, 7);
      found.push_back(std::move(added));
      status = found.end() - 1;
    } else if (status->kind.mode != lock::LockKind::Mode::limit) {
      continue; // held as another kind: its own holders
    }
    if (!r.truth(i, 2)) {
      ++status->waiters;
      continue;
    }
    lock::HolderInfo holder =
      holder_of_session(r.text(i, 3), r.text(i, 4), r.text(i, 5), r.number(i, 1));
    int limit = int(std::clamp<std::int64_t>(r.number(i, 8), 2, Semaphore::max_limit));
    if (!status->held) {
      status->held = true;
      status->holder = holder;
    }
    status->kind = lock::LockKind::semaphore(std::max(limit, int(status->slots.size()) + 1));
    status->slots.push_back(lock::SlotHolder{holder, -1});
  }
  std::sort(found.begin(), found.end(),
            [](const lock::LockStatus& a, const lock::LockStatus& b) { return a.name < b.name; });
}

} // namespace dlock::postgres
