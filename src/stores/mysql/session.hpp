#pragma once

#include "stores/mysql/url.hpp"
#include "stores/sql/session.hpp"
#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/event_loop.hpp"

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

struct st_mysql;
struct st_mysql_res;

namespace dlock::mysql {

// The rows of one answer, copied out of the library's result.
class Rows {
public:
  using Row = std::vector<std::optional<std::string>>;

  void add(Row row) { m_rows.push_back(std::move(row)); }
  int count() const { return int(m_rows.size()); }
  bool null(int row, int column) const { return !m_rows.at(row).at(column).has_value(); }
  // The value as text; empty when NULL.
  std::string text(int row, int column) const { return m_rows.at(row).at(column).value_or(""); }
  // The value as an integer; 0 when NULL. Throws Error(internal) if it is not one.
  std::int64_t number(int row, int column) const;

private:
  std::vector<Row> m_rows;
};

// What a query came to: its rows, or the error and the server's error number.
struct Answer {
  Rows rows;
  std::optional<Error> error;
  unsigned errnum = 0; // e.g. 1146 (no such table); 0 without an error
};

// One query of a session (one statement).
struct Query {
  std::string sql;
  std::function<void(Answer&)> done;
};

// One connection, that is one MySQL session (which owns the user-level locks it takes),
// driven without blocking through the library's *_start / *_cont calls: queries wait in a
// queue and go one at a time; each answer goes to its callback, which may put the query's
// next step at the front of the queue.
class Session final : public sql::QueuedSession<Query, Answer> {
public:
  using Callback = std::function<void(Answer&)>;

  // Starts connecting (nothing blocks but the host name's lookup; the outcome shows in the
  // first query's answer).
  explicit Session(const ConnectParams& params);
  // Ends the session, which frees every lock it holds; in a process forked after it was
  // opened, only closes this process's copy of the socket (the session is its parent's).
  ~Session() override;

  // Queues a query (one statement); first: before whatever is queued (an op's next step).
  void query(std::string sql, Callback done, bool first = false);
  // Has loop watch the socket for this round (an idle session too: to see it end); first
  // goes on with a step whose library time-out has passed.
  void watch(util::EventLoop& loop) override;
  bool busy() const noexcept override { return m_step != Step::idle || !m_queue.empty(); }
  bool connecting() const noexcept override { return m_step == Step::connecting; }
  int descriptor() const noexcept override;
  // Whether it runs over TCP (not a unix socket): the server's keepalives then apply.
  bool over_tcp() const noexcept;

private:
  enum class Step { connecting, idle, querying, storing, broken };
  void on_io(short revents);
  // Goes on with the step in flight once what it waited for (MYSQL_WAIT_*) is there.
  void resume(int ready);
  // The library's answer to a *_start or *_cont call: what it waits for now (0: done).
  void waiting_for(int status);
  void connected(bool ok);
  void send_next();
  void sent(int failed);
  void stored(::st_mysql_res* result);
  void answer(Answer& a);
  Error query_error() const;
  void fail(const Error& error) override;

  st_mysql* m_conn = nullptr;
  Step m_step = Step::connecting;
  int m_wait = 0;                 // MYSQL_WAIT_* the step in flight waits for
  util::TimePoint m_timeout_at{}; // with MYSQL_WAIT_TIMEOUT: when it times out
};

// The exit code of a server or client error number: 77 for access denied, 78 for an unknown
// database, 69 for the rest of the connection failures, 70 for what dlock cannot explain.
ExitCode error_code(unsigned errnum);

} // namespace dlock::mysql
