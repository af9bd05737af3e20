#pragma once

#include "stores/postgres/libpq.hpp"
#include "stores/sql/session.hpp"
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
  bool null(int row, int column) const
  {
    return pq().PQgetisnull(m_result.get(), row, column) != 0;
  }
  std::string text(int row, int column) const
  {
    return pq().PQgetvalue(m_result.get(), row, column);
  }
  // The value as an integer; 0 when NULL. Throws Error(internal) if it is not one.
  std::int64_t number(int row, int column) const;
  // "t" or "f".
  bool truth(int row, int column) const { return text(row, column) == "t"; }

private:
  std::shared_ptr<PGresult> m_result;
};

// What a query came to: its last result's rows, or the error and its SQLSTATE.
struct Answer {
  Rows rows{};
  // Every statement's rows, in order, of a query of several statements; those before an
  // error (which ends the query) are kept.
  std::vector<Rows> results{};
  std::optional<Error> error{};
  std::string sqlstate{}; // e.g. "55P03" (lock_not_available); empty without one
};

// How to reach the server, for libpq (PQconnectStartParams' keywords and values).
struct ConnectParams {
  std::vector<std::pair<std::string, std::string>> values; // "dbname" holds the URL
  std::string shown; // the URL without its password, for messages
};

// One query of a session: $1, $2… are params; blocks: it may wait in the server.
struct Query {
  std::string sql;
  std::vector<std::string> params;
  std::function<void(Answer&)> done;
  bool blocks = false;
};

// One libpq connection, that is one PostgreSQL session (which owns the advisory locks it
// takes), driven without blocking: queries wait in a queue and go one at a time; each answer
// goes to its callback, which may put the query's next step at the front of the queue.
// Before any of them, the session notes the role's search path (the setting dlock.home_path,
// for fence_table.hpp) and pins its own to pg_catalog, pg_temp: no function, operator or
// table another role put in a schema of the path (a writable public) is used for PostgreSQL's
// own; a session that cannot pin it ends. The same statement checks that the server is
// PostgreSQL itself and not a pooler (PgBouncer), whose session is not the server's: a
// session behind one ends with Error(config) before anything else runs. The pin goes in one
// round trip with the first query when that one has no parameters (statements of one message
// run in order, and none after one that failed).
class Session final : public sql::QueuedSession<Query, Answer> {
public:
  using Callback = std::function<void(Answer&)>;

  // Starts connecting (nothing blocks; the outcome shows in the first query's answer).
  explicit Session(const ConnectParams& params);
  // Ends the session, which frees every lock it holds; in a process forked after it was
  // opened, only closes this process's copy of the socket (the session is its parent's).
  ~Session() override;

  // Queues a query ($1, $2… are params); first: before whatever is queued (an op's next step).
  void query(std::string sql, std::vector<std::string> params, Callback done, bool first = false);
  // Queues a query that blocks in the server (pg_advisory_lock), which cancel() interrupts.
  void query_blocking(std::string sql, Callback done);
  void watch(util::EventLoop& loop) override;
  // Asks the server to cancel a blocking query in flight, so that a waiter that gives up does
  // not stay in the lock's queue (where it holds back shared holders). Best effort, and
  // bounded: the cancel request needs a connection of its own, which a partition would hang.
  void cancel() noexcept override;
  bool busy() const noexcept override { return m_in_flight || !m_queue.empty() || m_connecting; }
  bool connecting() const noexcept override { return m_connecting; }
  int descriptor() const noexcept override;
  // Hands each notification the session receives (LISTEN) to notified, by channel.
  void on_notify(std::function<void(const std::string&)> notified)
  {
    m_notified = std::move(notified);
  }

private:
  void on_io(short revents);
  void advance_connect();
  void send_next();
  void read_answers();
  // Hands on the notifications libpq has read.
  void take_notifications();
  void fail(const Error& error) override;
  // libpq's message on one line, without the URL's secrets or the password (which libpq may
  // quote, as it does a malformed escape).
  std::string message(const char* text) const;

  PGconn* m_conn = nullptr;
  std::vector<std::string> m_urls;      // "dbname" values: URLs, whose secrets messages hide
  std::vector<std::string> m_passwords; // "password" and "sslpassword" values
  bool m_connecting = true;
  PostgresPollingStatusType m_poll = PGRES_POLLING_WRITING;
  bool m_in_flight = false;
  bool m_flushing = false;
  bool m_unpinned = false; // connected, the search path not yet pinned
  int m_pin_results = 0;   // results of the query in flight that are the pin's
  bool m_pin_failed = false;
  Answer m_answer; // of the query in flight, while its results come in
  std::function<void(const std::string&)> m_notified;
};

// The exit code of a connection failure, from libpq's message: 77 for authentication, 78 for
// a database that does not exist, 69 for the rest (unreachable, refused, timed out).
Error connect_error(const std::string& shown, const std::string& message);

} // namespace dlock::postgres
