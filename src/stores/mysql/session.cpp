#include "stores/mysql/session.hpp"

#include "stores/mysql/libmariadb.hpp"
#include "util/text.hpp"

#include <errmsg.h>
#include <fcntl.h>
#include <mariadb_com.h>
#include <mysqld_error.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

namespace dlock::mysql {

namespace {

// The most text sent in one round trip (the server's max_allowed_packet is 16 MB by default):
// a batch stops before the statement that would pass it.
constexpr std::size_t batch_bytes = 256 * 1024;

} // namespace

ExitCode error_code(unsigned errnum)
{
  switch (errnum) {
  case ER_ACCESS_DENIED_ERROR:   // 1045: bad user or password
  case ER_DBACCESS_DENIED_ERROR: // 1044: no right to the database
  case ER_TABLEACCESS_DENIED_ERROR:
  case ER_SPECIFIC_ACCESS_DENIED_ERROR:
  case ER_KILL_DENIED_ERROR:
  case ER_ACCESS_DENIED_NO_PASSWORD_ERROR:
  case ER_NOT_SUPPORTED_AUTH_MODE:
    return ExitCode::auth;
  case ER_BAD_DB_ERROR: // 1049: no such database
    return ExitCode::config;
  case ER_CON_COUNT_ERROR:
  case ER_TOO_MANY_USER_CONNECTIONS:
  case ER_SERVER_SHUTDOWN:
  case ER_HOST_IS_BLOCKED:
  case ER_HOST_NOT_PRIVILEGED:
  case ER_OUT_OF_RESOURCES:
  case ER_LOCK_WAIT_TIMEOUT:
  case ER_LOCK_DEADLOCK:
    return ExitCode::unavailable;
  default:
    // 2000 and up: the client library's own (cannot connect, server gone, lost connection)
    return errnum >= CR_MIN_ERROR && errnum <= CR_MAX_ERROR ? ExitCode::unavailable
                                                            : ExitCode::internal;
  }
}

std::int64_t Rows::number(int row, int column) const
{
  return null(row, column) ? 0 : sql::parse_number(text(row, column), "MySQL");
}

Session::Session(const ConnectParams& params) : QueuedSession(params.shown)
{
  const LibMariaDb& lib = mariadb();
  bool tls = !params.tls_ca.empty() || !params.tls_cert.empty() || !params.tls_key.empty();
  if (!tls) {
    skip_tls_config();
  }
  m_conn = lib.mysql_init(nullptr);
  if (m_conn == nullptr) {
    m_step = Step::broken;
    m_broken = Error(ExitCode::internal, "MySQL at {}: out of memory", m_shown);
    return;
  }
  lib.mysql_options(m_conn, MYSQL_OPT_NONBLOCK, nullptr);
  unsigned timeout = params.connect_timeout_s;
  lib.mysql_options(m_conn, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
  lib.mysql_options(m_conn, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  if (params.port != 0 && params.socket.empty()) {
    // A port means TCP, even to localhost (which the library would take for its socket).
    unsigned protocol = MYSQL_PROTOCOL_TCP;
    lib.mysql_options(m_conn, MYSQL_OPT_PROTOCOL, &protocol);
  }
  if (!params.tls_ca.empty() || !params.tls_cert.empty() || !params.tls_key.empty()) {
    my_bool on = 1;
    lib.mysql_options(m_conn, MYSQL_OPT_SSL_ENFORCE, &on);
    if (!params.tls_ca.empty()) {
      lib.mysql_options(m_conn, MYSQL_OPT_SSL_CA, params.tls_ca.c_str());
      lib.mysql_options(m_conn, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &on);
    }
    if (!params.tls_cert.empty()) {
      lib.mysql_options(m_conn, MYSQL_OPT_SSL_CERT, params.tls_cert.c_str());
    }
    if (!params.tls_key.empty()) {
      lib.mysql_options(m_conn, MYSQL_OPT_SSL_KEY, params.tls_key.c_str());
    }
  }
  const char* password = params.password ? params.password->c_str() : nullptr;
  MYSQL* ret = nullptr;
  int status = lib.mysql_real_connect_start(
    &ret, m_conn, params.host.c_str(), params.user.empty() ? nullptr : params.user.c_str(),
    password, params.database.c_str(), params.port,
    params.socket.empty() ? nullptr : params.socket.c_str(), CLIENT_MULTI_STATEMENTS);
  if (int fd = int(lib.mysql_get_socket(m_conn)); fd >= 0) {
    // The library opens its socket without close-on-exec: no command may inherit the session.
    ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  }
  if (status == 0) {
    connected(ret != nullptr);
  } else {
    waiting_for(status);
  }
}

Session::~Session()
{
  if (m_conn == nullptr) {
    return;
  }
  if (!owned()) {
    // mysql_close would end the session, and free the parent's locks: close this copy only
    // (the library's memory stays, for the little while a forked process lives).
    if (int fd = int(mariadb().mysql_get_socket(m_conn)); fd >= 0) {
      ::close(fd);
    }
    return;
  }
  if (m_step != Step::idle && m_step != Step::broken) {
    // A step in flight (a GET_LOCK that waits): the library cannot say goodbye in the middle
    // of it; shutting the socket down ends the session, and the server notices at once.
    if (int fd = int(mariadb().mysql_get_socket(m_conn)); fd >= 0) {
      ::shutdown(fd, SHUT_RDWR);
    }
  }
  mariadb().mysql_close(m_conn);
}

int Session::descriptor() const noexcept
{
  return m_conn == nullptr ? -1 : int(mariadb().mysql_get_socket(m_conn));
}

bool Session::over_tcp() const noexcept
{
  if (m_conn == nullptr) {
    return false;
  }
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  int fd = int(mariadb().mysql_get_socket(m_conn));
  if (fd < 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return true;
  }
  return address.ss_family != AF_UNIX;
}

void Session::enqueue(Query q, bool first)
{
  if (!first) {
    m_queue.push_back(std::move(q));
    return;
  }
  m_firsts = std::min(m_firsts, m_queue.size());
  m_queue.insert(m_queue.begin() + std::ptrdiff_t(m_firsts), std::move(q));
  ++m_firsts;
}

void Session::query(std::string sql, Callback done, bool first)
{
  enqueue(Query{std::move(sql), std::move(done)}, first);
  send_next();
}

void Session::later(std::string sql, bool first)
{
  Query q{std::move(sql), nullptr};
  q.lazy = true;
  enqueue(std::move(q), first);
}

void Session::query_all(std::vector<std::string> statements,
                        std::function<void(std::vector<Answer>&)> done, bool first)
{
  if (statements.empty()) {
    std::vector<Answer> none;
    done(none);
    return;
  }
  auto answers = std::make_shared<std::vector<Answer>>();
  std::size_t count = statements.size();
  std::vector<Query> parts;
  for (std::size_t i = 0; i < count; ++i) {
    parts.push_back(Query{std::move(statements[i]),
                          [answers, count, done](Answer& a) {
                            answers->push_back(std::move(a));
                            if (answers->size() == count) {
                              done(*answers);
                            }
                          },
                          i + 1 < count});
  }
  for (Query& q : parts) {
    enqueue(std::move(q), first);
  }
  send_next();
}

void Session::forget_queries() noexcept
{
  QueuedSession::forget_queries();
  for (Query& q : m_batch) {
    q.done = nullptr;
  }
}

void Session::watch(util::EventLoop& loop)
{
  if (watch_ended(loop)) {
    return;
  }
  send_next(true); // lazy statements that no other followed
  if ((m_wait & MYSQL_WAIT_TIMEOUT) != 0 && util::monotonic_now() >= m_timeout_at) {
    resume(MYSQL_WAIT_TIMEOUT);
    loop.wake_at(util::monotonic_now()); // its answer may be ready for the caller
    if (m_broken) {
      return;
    }
  }
  short events = 0;
  if (m_step == Step::idle) {
    events = POLLIN; // nothing is owed: data or an end is the server ending the session
  } else {
    if ((m_wait & MYSQL_WAIT_READ) != 0) {
      events |= POLLIN;
    }
    if ((m_wait & MYSQL_WAIT_WRITE) != 0) {
      events |= POLLOUT;
    }
    if ((m_wait & MYSQL_WAIT_EXCEPT) != 0) {
      events |= POLLPRI;
    }
    if ((m_wait & MYSQL_WAIT_TIMEOUT) != 0) {
      loop.wake_at(m_timeout_at);
    }
  }
  int fd = int(mariadb().mysql_get_socket(m_conn));
  loop.watch(fd, events, [this](short revents) { on_io(revents); });
}

void Session::on_io(short revents)
{
  if (m_broken) {
    return;
  }
  if (m_step == Step::idle) {
    char byte = 0;
    ssize_t got =
      ::recv(int(mariadb().mysql_get_socket(m_conn)), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return;
    }
    // The server closed the connection, or sent what nobody asked for (the error packet of a
    // session it ends): either way the session is over.
    fail(Error(ExitCode::unavailable, "MySQL at {}: the server ended the session", m_shown));
    return;
  }
  int ready = 0;
  if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    ready |= MYSQL_WAIT_READ;
  }
  if ((revents & (POLLOUT | POLLHUP | POLLERR)) != 0) {
    ready |= MYSQL_WAIT_WRITE;
  }
  if ((revents & POLLPRI) != 0) {
    ready |= MYSQL_WAIT_EXCEPT;
  }
  resume(ready);
}

void Session::resume(int ready)
{
  const LibMariaDb& lib = mariadb();
  switch (m_step) {
  case Step::connecting: {
    MYSQL* ret = nullptr;
    int status = lib.mysql_real_connect_cont(&ret, m_conn, ready);
    if (status == 0) {
      connected(ret != nullptr);
    } else {
      waiting_for(status);
    }
    return;
  }
  case Step::querying: {
    int failed = 0;
    int status = lib.mysql_real_query_cont(&failed, m_conn, ready);
    if (status == 0) {
      sent(failed);
    } else {
      waiting_for(status);
    }
    return;
  }
  case Step::next: {
    int ret = 0;
    int status = lib.mysql_next_result_cont(&ret, m_conn, ready);
    if (status == 0) {
      next_sent(ret);
    } else {
      waiting_for(status);
    }
    return;
  }
  case Step::storing: {
    MYSQL_RES* result = nullptr;
    int status = lib.mysql_store_result_cont(&result, m_conn, ready);
    if (status == 0) {
      stored(result);
    } else {
      waiting_for(status);
    }
    return;
  }
  case Step::idle:
  case Step::broken:
    return;
  }
}

void Session::waiting_for(int status)
{
  m_wait = status;
  if ((status & MYSQL_WAIT_TIMEOUT) != 0) {
    m_timeout_at = util::deadline_after(util::Millis(mariadb().mysql_get_timeout_value_ms(m_conn)));
  }
}

void Session::connected(bool ok)
{
  m_wait = 0;
  if (!ok) {
    unsigned errnum = mariadb().mysql_errno(m_conn);
    m_step = Step::broken;
    if (errnum == ER_DBACCESS_DENIED_ERROR) {
      // The URL's database, refused: MySQL does not say whether it is missing or this user's
      // to use, so it is the configuration's (78), as a Redis database index the server refuses.
      fail(Error(ExitCode::config,
                 "MySQL at {}: {} (it does not exist, or this user may not "
                 "use it)",
                 m_shown, util::one_line(mariadb().mysql_error(m_conn))));
      return;
    }
    fail(Error(error_code(errnum), "MySQL at {}: {}", m_shown,
               util::one_line(mariadb().mysql_error(m_conn))));
    return;
  }
  m_step = Step::idle;
  send_next();
}

void Session::send_next(bool flush)
{
  if (m_queue.empty() || m_broken || m_step != Step::idle || m_dispatching) {
    return;
  }
  if (!flush
      && std::all_of(m_queue.begin(), m_queue.end(), [](const Query& q) { return q.lazy; })) {
    return; // for the next statement, or the next watch
  }
  // the front statement, and those after it while the one before has no callback (nobody
  // waits for its answer) or is bundled with them
  m_batch.clear();
  m_sent.clear();
  m_firsts = 0;
  do {
    if (!m_batch.empty()) {
      m_sent += ';';
    }
    m_sent += m_queue.front().sql;
    m_batch.push_back(std::move(m_queue.front()));
    m_queue.pop_front();
  } while (!m_queue.empty() && (m_batch.back().bundled || !m_batch.back().done)
           && m_sent.size() + m_queue.front().sql.size() < batch_bytes);
  m_step = Step::querying;
  int failed = 0;
  int status = mariadb().mysql_real_query_start(&failed, m_conn, m_sent.data(), m_sent.size());
  if (status == 0) {
    sent(failed);
  } else {
    waiting_for(status);
  }
}

void Session::sent(int failed)
{
  m_wait = 0;
  if (failed != 0) {
    stored(nullptr);
    return;
  }
  m_step = Step::storing;
  MYSQL_RES* result = nullptr;
  int status = mariadb().mysql_store_result_start(&result, m_conn);
  if (status == 0) {
    stored(result);
  } else {
    waiting_for(status);
  }
}

void Session::next_sent(int ret)
{
  m_wait = 0;
  if (ret < 0) { // no more results after all (cannot be: more were announced)
    Answer a;
    a.error = Error(ExitCode::internal, "MySQL at {}: fewer answers than statements", m_shown);
    answer(a);
    return;
  }
  sent(ret);
}

Error Session::query_error() const
{
  unsigned errnum = mariadb().mysql_errno(m_conn);
  return Error(error_code(errnum), "MySQL at {}: {}", m_shown,
               util::one_line(mariadb().mysql_error(m_conn)));
}

void Session::stored(MYSQL_RES* result)
{
  const LibMariaDb& lib = mariadb();
  m_wait = 0;
  Answer a;
  if (result != nullptr) {
    unsigned fields = lib.mysql_num_fields(result);
    while (MYSQL_ROW row = lib.mysql_fetch_row(result)) {
      unsigned long* lengths = lib.mysql_fetch_lengths(result);
      Rows::Row values;
      for (unsigned i = 0; i < fields; ++i) {
        if (row[i] == nullptr) {
          values.emplace_back();
        } else {
          values.emplace_back(std::string(row[i], lengths[i]));
        }
      }
      a.rows.add(std::move(values));
    }
    lib.mysql_free_result(result);
  } else if (unsigned errnum = lib.mysql_errno(m_conn); errnum != 0) {
    a.errnum = errnum;
    a.error = query_error();
    if ((errnum >= CR_MIN_ERROR && errnum <= CR_MAX_ERROR) || errnum == ER_CONNECTION_KILLED) {
      // the connection is gone (server gone away, lost, killed): so is the session
      fail(Error(ExitCode::unavailable, "MySQL at {}: the session ended ({})", m_shown,
                 util::one_line(lib.mysql_error(m_conn))));
      return;
    }
  }
  answer(a);
}

void Session::dispatch(Query& q, Answer& a)
{
  if (!q.done) {
    return;
  }
  bool outer = m_dispatching;
  m_dispatching = true;
  m_firsts = 0;
  q.done(a);
  m_dispatching = outer;
}

void Session::answer(Answer& a)
{
  const LibMariaDb& lib = mariadb();
  if (m_batch.empty()) { // a result nobody asked for (a statement with a ';' of its own)
    m_batch.emplace_back();
  }
  Query q = std::move(m_batch.front());
  m_batch.pop_front();
  bool more = !a.error && lib.mysql_more_results(m_conn) != 0;
  if (!more) {
    // the statements after an error did not run: those bundled with it share it, the rest go
    // back to the front of the queue (and their callbacks' follow-ups before them)
    std::vector<Query> sharing;
    bool bundled = q.bundled;
    while (a.error && bundled && !m_batch.empty()) {
      bundled = m_batch.front().bundled;
      sharing.push_back(std::move(m_batch.front()));
      m_batch.pop_front();
    }
    while (!m_batch.empty()) {
      m_queue.push_front(std::move(m_batch.back()));
      m_batch.pop_back();
    }
    m_step = Step::idle;
    dispatch(q, a);
    for (Query& shared : sharing) {
      Answer copy = a;
      dispatch(shared, copy);
    }
    if (!m_broken) {
      send_next();
    }
    return;
  }
  m_step = Step::next;
  dispatch(q, a);
  if (m_broken || m_step != Step::next) {
    return;
  }
  int ret = 0;
  int status = lib.mysql_next_result_start(&ret, m_conn);
  if (status == 0) {
    next_sent(ret);
  } else {
    waiting_for(status);
  }
}

void Session::fail(const Error& error)
{
  ended(error); // busy() still says whether a query in flight will hear of it
  m_step = Step::broken;
  m_wait = 0;
  while (!m_batch.empty()) { // owed an answer, in order, before what is queued
    m_queue.push_front(std::move(m_batch.back()));
    m_batch.pop_back();
  }
  Answer failed;
  failed.error = *m_broken;
  failed.errnum = CR_SERVER_LOST;
  fail_queries(failed, true);
}

} // namespace dlock::mysql
