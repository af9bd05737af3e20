#pragma once

#include "stores/postgres/libpq.hpp"
#include "util/error.hpp"
#include "util/event_loop.hpp"

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dlock::postgres {

// The rows of one answer (a PGresult), freed with it.
class Rows {
public:
  Rows() = default;
  explicit Rows(PGresult* result) : m_result(result, pq().PQclear) {}

  int count() const { return m_result ? pq().PQntuples(m_result.get()) : 0; }
  bool null(int row, int column) const { return pq().PQgetisnull(m_result.get(), row, column) != 0; }
  std::string text(int row, int column) const { return pq().PQgetvalue(m_result.get(), row, column); }
  // The value as an integer; 0 when NULL. Throws Error(internal) if it is not one.
  std::int64_t number(int row, int column) const;
  // "t" or "f".
  bool truth(int row, int column) const { return text(row, column) == "t"; }

private:
  std::shared_ptr<PGresult> m_result;
};

// What a query came to: its last result's rows, or the error and its SQLSTATE.
struct Answer {
  Rows rows;
  std::optional<Error> error;
  std::string sqlstate; // e.g. "55P03" (lock_not_available); empty without one
};

// How to reach the server, for libpq (PQconnectStartParams' keywords and values).
struct ConnectParams {
  std::vector<std::pair<std::string, std::string>> values; // "dbname" holds the URL
  std::string shown; // the URL without its password, for messages
};

// One libpq connection, that is one PostgreSQL session (which owns the advisory locks it
// takes), driven without blocking: queries wait in a queue and go one at a time; each answer
// goes to its callback, which may put the query's next step at the front of the queue.
class Session {
public:
  using Callback = std::function<void(Answer&)>;

  // Starts connecting (nothing blocks; the outcome shows in the first query's answer).
  explicit Session(const ConnectParams& params);
  // Ends the session, which frees every lock it holds; in a process forked after it was
  // opened, only closes this process's copy of the socket (the session is its parent's).
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Queues a query ($1, $2… are params); first: before whatever is queued (an op's next step).
  void query(std::string sql, std::vector<std::string> params, Callback done, bool first = false);
  // Queues a query that blocks in the server (pg_advisory_lock), which cancel() interrupts.
  void query_blocking(std::string sql, Callback done);
  // Has loop watch the socket for this round (an idle session too: to see it end).
  void watch(util::EventLoop& loop);
  // Forgets what is queued and the callback of the query in flight, whose answer is read and
  // dropped; the session and its locks stay.
  void forget_queries() noexcept;
  // Asks the server to cancel a blocking query in flight, so that a waiter that gives up does
  // not stay in the lock's queue (where it holds back shared holders). Best effort, and
  // bounded: the cancel request needs a connection of its own, which a partition would hang.
  void cancel() noexcept;
  // Called once when the connection ends, before the answers it still owes (which fail).
  void on_end(std::function<void(const Error&)> ended) { m_on_end = std::move(ended); }

  // The connection ended (or never came up); broken_error() says how.
  bool broken() const noexcept { return m_broken.has_value(); }
  const Error& broken_error() const { return *m_broken; }
  bool busy() const noexcept { return m_in_flight || !m_queue.empty() || m_connecting; }
  bool connecting() const noexcept { return m_connecting; }
  // Whether this process opened it (not a fork's inherited copy).
  bool owned() const noexcept;
  const std::string& shown() const noexcept { return m_shown; }

private:
  struct Query {
    std::string sql;
    std::vector<std::string> params;
    Callback done;
    bool blocks = false;
  };

  void on_io(short revents);
  void advance_connect();
  void send_next();
  void read_answers();
  void fail(const Error& error);

  PGconn* m_conn = nullptr;
  pid_t m_owner = 0;
  std::string m_shown;
  bool m_connecting = true;
  PostgresPollingStatusType m_poll = PGRES_POLLING_WRITING;
  bool m_in_flight = false;
  bool m_flushing = false;
  std::optional<Query> m_current;
  std::deque<Query> m_queue;
  std::optional<Error> m_broken;
  Answer m_answer; // of the query in flight, while its results come in
  std::function<void(const Error&)> m_on_end;
};

// The exit code of a connection failure, from libpq's message: 77 for authentication, 78 for
// a database that does not exist, 69 for the rest (unreachable, refused, timed out).
Error connect_error(const std::string& shown, const std::string& message);

} // namespace dlock::postgres
