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

// One statement of a session, with its callback (none: nobody waits for its answer).
struct Query {
  std::string sql;
  std::function<void(Answer&)> done;
  // Part of a query_all: goes in one round trip with the next statement, which an error here
  // does not skip but answers with the same error.
  bool bundled = false;
  // Nobody waits for it, and it need not go before the next statement queued: it waits for
  // that one, or for the next watch (a round trip of its own saved).
  bool lazy = false;
};

// One connection, that is one MySQL session (which owns the user-level locks it takes),
// driven without blocking through the library's *_start / *_cont calls: queries wait in a
// queue; each answer goes to its callback, which may put the query's next step at the front
// of the queue. A round trip costs more than a statement, so statements that nobody waits
// for (no callback) go in one round trip with the statement queued after them, and so do the
// statements of a query_all (the session asks for multi-statements); an error ends such a
// round trip early (the server runs none of the statements after it): those queued on their
// own go back to the queue, those of the same query_all share the error.
class Session final : public sql::QueuedSession<Query, Answer> {
public:
  using Callback = std::function<void(Answer&)>;

  // Starts connecting (nothing blocks but the host name's lookup; the outcome shows in the
  // first query's answer).
  explicit Session(const ConnectParams& params);
  // Ends the session, which frees every lock it holds; in a process forked after it was
  // opened, only closes this process's copy of the socket (the session is its parent's).
  ~Session() override;

  // Queues a query (one statement); first: before whatever was queued before the callback
  // that runs (an op's next steps, in the order they are queued).
  void query(std::string sql, Callback done, bool first = false);
  // Queues a statement nobody waits for, which goes with the next one queued (or at the next
  // watch at the latest).
  void later(std::string sql, bool first = false);
  // Queues statements that go in one round trip; done has an answer for each, in order
  // (those after an error: that error).
  void query_all(std::vector<std::string> statements,
                 std::function<void(std::vector<Answer>&)> done, bool first = false);
  // As QueuedSession's, for the statements of the round trip in flight too.
  void forget_queries() noexcept override;
  // Has loop watch the socket for this round (an idle session too: to see it end); first
  // goes on with a step whose library time-out has passed.
  void watch(util::EventLoop& loop) override;
  bool busy() const noexcept override { return m_step != Step::idle || !m_queue.empty(); }
  bool connecting() const noexcept override { return m_step == Step::connecting; }
  int descriptor() const noexcept override;
  // Whether it runs over TCP (not a unix socket): the server's keepalives then apply.
  bool over_tcp() const noexcept;

private:
  enum class Step { connecting, idle, querying, storing, next, broken };
  void enqueue(Query q, bool first);
  void on_io(short revents);
  // Goes on with the step in flight once what it waited for (MYSQL_WAIT_*) is there.
  void resume(int ready);
  // The library's answer to a *_start or *_cont call: what it waits for now (0: done).
  void waiting_for(int status);
  void connected(bool ok);
  // Sends what is queued, unless it is all lazy and not flush.
  void send_next(bool flush = false);
  void sent(int failed);
  // The next statement's result is there (ret: 0), or its error (ret > 0).
  void next_sent(int ret);
  void stored(::st_mysql_res* result);
  // Hands the answer of the batch's first statement to its callback, then goes on with the
  // batch's next statement, or the queue's.
  void answer(Answer& a);
  // Runs a callback, with the session's sending held back until it returns (what it queues
  // goes in one round trip).
  void dispatch(Query& q, Answer& a);
  Error query_error() const;
  void fail(const Error& error) override;

  st_mysql* m_conn = nullptr;
  Step m_step = Step::connecting;
  int m_wait = 0;                 // MYSQL_WAIT_* the step in flight waits for
  util::TimePoint m_timeout_at{}; // with MYSQL_WAIT_TIMEOUT: when it times out
  std::deque<Query> m_batch;      // the statements of the round trip in flight, not yet answered
  std::string m_sent;             // their text, joined by ';'
  bool m_dispatching = false;     // a callback runs: what it queues is sent once it returns
  std::size_t m_firsts = 0;       // queued first since the callback began: the next goes after
};

// The exit code of a server or client error number: 77 for access denied, 78 for an unknown
// database, 69 for the rest of the connection failures, 70 for what dlock cannot explain.
ExitCode error_code(unsigned errnum);

} // namespace dlock::mysql
