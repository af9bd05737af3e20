#include "stores/postgres/session.hpp"

#include "util/clock.hpp"
#include "util/text.hpp"
#include "util/url.hpp"

#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include <future>
#include <string_view>
#include <thread>

namespace dlock::postgres {

namespace {

// The exit code of a failed query, from its SQLSTATE's class.
ExitCode query_error_code(const std::string& sqlstate)
{
  std::string cls = sqlstate.substr(0, 2);
  if (cls == "08" || cls == "53" || cls == "57" || cls == "58") {
    return ExitCode::unavailable; // connection, resources, operator intervention, system
  }
  if (cls == "40" || sqlstate == "55P03") {
    return ExitCode::unavailable; // a deadlock, a lock another session held past lock_timeout
  }
  if (cls == "22") {
    return ExitCode::usage; // data exception: a lock name the database's encoding refuses
  }
  if (cls == "28" || sqlstate == "42501") {
    return ExitCode::auth; // authorization, insufficient privilege
  }
  if (sqlstate == "3D000") {
    return ExitCode::config; // no such database
  }
  return ExitCode::internal;
}

void ignore_notice(void*, const char*) {}

// The name of a setting no server has (without a dot it cannot be a custom one, which a role
// or a database owner could define): the pin reads it only behind a pooler, so that its
// statement fails, which ends the query before anything sent after it runs; the error, which
// quotes the name, tells read_answers why.
constexpr std::string_view pooler_marker = "dlock: not the backend the connection announced";

// What every session runs first (see Session): the role's search path noted and the pooler
// check, then the session's path pinned. Two statements, which the server runs in order (the
// second and any query sent with them only if the first succeeded). The check: PostgreSQL
// announces its backend's pid when a connection starts (libpq's PQbackendPID), and
// pg_backend_pid() is that pid on every statement of the session; a pooler (PgBouncer, and
// others that answer cancel requests themselves) announces a random number of its own (or
// none: 0), and runs the statement on whichever server connection it hands out.
std::string pin_search_path(int announced_pid)
{
  return fmt::format("SELECT pg_catalog.set_config('dlock.home_path', "
                     "pg_catalog.current_schemas(false)::pg_catalog.text, false), "
                     "CASE WHEN pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.=) ({}) "
                     "THEN '' ELSE pg_catalog.current_setting('{}') END; "
                     "SET search_path = pg_catalog, pg_temp",
                     announced_pid, pooler_marker);
}

// Why dlock refuses a pooler (see pin_search_path).
Error behind_pooler(const std::string& shown)
{
  return Error(ExitCode::config,
               "PostgreSQL at {} is a connection pooler (PgBouncer or alike), not the server "
               "itself (its backend pid is not the one the connection announced): dlock's locks "
               "are session advisory locks, which a pooler shares with its other clients or "
               "drops between transactions; connect dlock to PostgreSQL directly (man dlock, "
               "DATABASE STORES)",
               shown);
}

// The longest dlock waits for a cancel request to reach the server.
constexpr std::chrono::milliseconds cancel_limit{500};

} // namespace

std::int64_t Rows::number(int row, int column) const
{
  return null(row, column) ? 0 : sql::parse_number(text(row, column), "PostgreSQL");
}

Error connect_error(const std::string& shown, const std::string& message)
{
  auto has = [&](const char* text) { return message.find(text) != std::string::npos; };
  ExitCode code = ExitCode::unavailable;
  if (has("authentication failed") || has("no password supplied") || has("pg_hba.conf")
      || (has("role \"") && has("does not exist")) || has("permission denied")) {
    code = ExitCode::auth;
  } else if (has("database \"") && has("does not exist")) {
    code = ExitCode::config;
  }
  return Error(code, "PostgreSQL at {}: {}", shown, message);
}

Session::Session(const ConnectParams& params) : QueuedSession(params.shown)
{
  std::vector<const char*> keywords;
  std::vector<const char*> values;
  for (const auto& [keyword, value] : params.values) {
    keywords.push_back(keyword.c_str());
    values.push_back(value.c_str());
    if (keyword == "dbname") {
      m_urls.push_back(value);
    } else if ((keyword == "password" || keyword == "sslpassword") && !value.empty()) {
      m_passwords.push_back(value);
    }
  }
  keywords.push_back(nullptr);
  values.push_back(nullptr);
  m_conn = pq().PQconnectStartParams(keywords.data(), values.data(), 1);
  if (m_conn == nullptr) {
    m_broken = Error(ExitCode::internal, "PostgreSQL at {}: out of memory", m_shown);
    m_connecting = false;
  } else if (pq().PQstatus(m_conn) == CONNECTION_BAD) {
    m_broken = connect_error(m_shown, message(pq().PQerrorMessage(m_conn)));
    m_connecting = false;
  }
}

Session::~Session()
{
  if (m_conn == nullptr) {
    return;
  }
  if (owned()) {
    pq().PQfinish(m_conn);
  } else if (int fd = pq().PQsocket(m_conn); fd >= 0) {
    ::close(fd); // PQfinish would end the session, and free the parent's locks
  }
}

void Session::query(std::string sql, std::vector<std::string> params, Callback done, bool first)
{
  add(Query{std::move(sql), std::move(params), std::move(done)}, first);
  if (!m_connecting && !m_in_flight && !m_broken) {
    send_next();
  }
}

void Session::query_blocking(std::string sql, Callback done)
{
  m_queue.push_back(Query{std::move(sql), {}, std::move(done), true});
  if (!m_connecting && !m_in_flight && !m_broken) {
    send_next();
  }
}

int Session::descriptor() const noexcept { return m_conn == nullptr ? -1 : pq().PQsocket(m_conn); }

void Session::watch(util::EventLoop& loop)
{
  if (watch_ended(loop)) {
    return;
  }
  short events = POLLIN;
  if (m_connecting) {
    events = m_poll == PGRES_POLLING_WRITING ? POLLOUT : POLLIN;
  } else if (m_flushing) {
    events |= POLLOUT;
  }
  int fd = pq().PQsocket(m_conn);
  loop.watch(fd, events, [this](short revents) { on_io(revents); });
}

void Session::on_io(short revents)
{
  if (m_broken) {
    return;
  }
  if (m_connecting) {
    advance_connect();
    return;
  }
  if (m_flushing && (revents & POLLOUT) != 0) {
    int flushed = pq().PQflush(m_conn);
    if (flushed < 0) {
      fail(Error(ExitCode::unavailable, "PostgreSQL at {}: {}", m_shown,
                 message(pq().PQerrorMessage(m_conn))));
      return;
    }
    m_flushing = flushed == 1;
  }
  if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    read_answers();
  }
}

void Session::advance_connect()
{
  m_poll = pq().PQconnectPoll(m_conn);
  if (m_poll == PGRES_POLLING_FAILED) {
    m_connecting = false;
    fail(connect_error(m_shown, message(pq().PQerrorMessage(m_conn))));
    return;
  }
  if (m_poll != PGRES_POLLING_OK) {
    return;
  }
  m_connecting = false;
  pq().PQsetnonblocking(m_conn, 1);
  pq().PQsetNoticeProcessor(m_conn, ignore_notice, nullptr);
  m_unpinned = true;
  send_next();
}

std::string Session::message(const char* text) const
{
  std::string line = util::one_line(text != nullptr ? text : "");
  for (const std::string& url : m_urls) {
    line = util::without_url_secrets(std::move(line), url);
  }
  for (const std::string& password : m_passwords) {
    for (std::size_t at = line.find(password); at != std::string::npos;
         at = line.find(password, at + 3)) {
      line.replace(at, password.size(), "***");
    }
  }
  return line;
}

void Session::send_next()
{
  // in flight: a callback sent its next step already (one query at a time)
  if (m_queue.empty() || m_broken || m_in_flight) {
    return;
  }
  std::string pin;
  if (m_unpinned) {
    m_unpinned = false;
    const Query& first = m_queue.front();
    if (first.params.empty() && !first.blocks) {
      pin = pin_search_path(pq().PQbackendPID(m_conn)) + "; "; // its two results come first
      m_pin_results = 2;
    } else {
      m_queue.push_front(
        Query{pin_search_path(pq().PQbackendPID(m_conn)), {}, [this](Answer& pinned) {
                if (pinned.error) {
                  fail(*pinned.error); // nothing runs unpinned
                }
              }});
    }
  }
  m_current = std::move(m_queue.front());
  m_queue.pop_front();
  int sent = 0;
  if (m_current->params.empty()) {
    // may hold several statements
    sent = pq().PQsendQuery(m_conn, (pin + m_current->sql).c_str());
  } else {
    std::vector<const char*> values;
    for (const std::string& param : m_current->params) {
      values.push_back(param.c_str());
    }
    sent = pq().PQsendQueryParams(m_conn, m_current->sql.c_str(), int(values.size()), nullptr,
                                  values.data(), nullptr, nullptr, 0);
  }
  if (sent == 0) {
    fail(Error(ExitCode::unavailable, "PostgreSQL at {}: {}", m_shown,
               message(pq().PQerrorMessage(m_conn))));
    return;
  }
  m_in_flight = true;
  m_answer = Answer{};
  int flushed = pq().PQflush(m_conn);
  m_flushing = flushed == 1;
  if (flushed < 0) {
    fail(Error(ExitCode::unavailable, "PostgreSQL at {}: {}", m_shown,
               message(pq().PQerrorMessage(m_conn))));
  }
}

void Session::read_answers()
{
  if (pq().PQconsumeInput(m_conn) == 0 || pq().PQstatus(m_conn) == CONNECTION_BAD) {
    fail(Error(ExitCode::unavailable, "PostgreSQL at {}: the session ended ({})", m_shown,
               message(pq().PQerrorMessage(m_conn))));
    return;
  }
  take_notifications();
  while (m_in_flight && pq().PQisBusy(m_conn) == 0) {
    PGresult* result = pq().PQgetResult(m_conn);
    if (result == nullptr) { // the query is answered
      Answer answer = std::move(m_answer);
      m_answer = Answer{};
      if (m_pin_failed) { // nothing runs unpinned
        m_pin_failed = false;
        m_pin_results = 0;
        fail(*answer.error);
        return;
      }
      m_in_flight = false;
      m_pin_results = 0;
      finish(answer);
      if (m_broken) {
        return;
      }
      send_next();
      if (!m_in_flight) {
        return;
      }
      continue;
    }
    ExecStatusType status = pq().PQresultStatus(result);
    bool pinning = m_pin_results > 0;
    if (pinning) {
      --m_pin_results;
    }
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      if (!m_answer.error && !pinning) {
        m_answer.rows = Rows(result);
        m_answer.results.push_back(m_answer.rows);
        continue;
      }
    } else if (!m_answer.error) {
      m_pin_failed = pinning;
      const char* state = pq().PQresultErrorField(result, PG_DIAG_SQLSTATE);
      m_answer.sqlstate = state != nullptr ? state : "";
      // The primary message and its detail; not the statement or a caret under it.
      const char* primary = pq().PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
      const char* detail = pq().PQresultErrorField(result, PG_DIAG_MESSAGE_DETAIL);
      std::string message =
        util::one_line(primary != nullptr ? primary : pq().PQresultErrorMessage(result));
      if (detail != nullptr) {
        message += " (" + util::one_line(detail) + ")";
      }
      m_answer.error =
        Error(query_error_code(m_answer.sqlstate), "PostgreSQL at {}: {}", m_shown, message);
      if (m_answer.sqlstate == "42704" && message.find(pooler_marker) != std::string::npos) {
        m_answer.error = behind_pooler(m_shown); // the pin's check (pin_search_path)
      }
    }
    pq().PQclear(result);
  }
}

void Session::take_notifications()
{
  while (PGnotify* notice = pq().PQnotifies(m_conn)) {
    std::string channel = notice->relname != nullptr ? notice->relname : "";
    pq().PQfreemem(notice);
    if (m_notified) {
      m_notified(channel);
    }
  }
}

void Session::fail(const Error& error)
{
  ended(error);
  m_connecting = false;
  m_flushing = false;
  bool in_flight = m_in_flight;
  m_in_flight = false;
  Answer failed;
  failed.error = *m_broken;
  fail_queries(failed, in_flight);
}

void Session::cancel() noexcept
{
  if (m_conn == nullptr || !m_in_flight || !m_current || !m_current->blocks || !owned()) {
    return;
  }
  PGcancel* request = pq().PQgetCancel(m_conn);
  if (request == nullptr) {
    return;
  }
  // PQcancel blocks until the server took the request: a thread sends it, and dlock waits
  // for it at most cancel_limit (an unfinished thread ends with the process).
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> sent = done->get_future();
  try {
    std::thread([request, done] {
      char message[256];
      pq().PQcancel(request, message, sizeof message);
      pq().PQfreeCancel(request);
      done->set_value();
    }).detach();
    sent.wait_for(cancel_limit);
  } catch (const std::system_error&) {
    pq().PQfreeCancel(request); // no thread: the server ends the wait at lock_timeout
  }
}

} // namespace dlock::postgres
