#pragma once

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
#include <string_view>

namespace dlock::sql {

// One connection, that is one database session (which owns the locks it takes), as the step
// chain (sql_store.hpp) keeps one per lock name: whether it is still up, still this process's
// and still busy. Queries and their answers are the database's own (postgres/session.hpp,
// mysql/session.hpp).
class Session {
public:
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  virtual ~Session() = default;

  // Has loop watch the socket for this round (an idle session too: to see it end).
  virtual void watch(util::EventLoop& loop) = 0;
  // Forgets what is queued and the callback of the query in flight, whose answer is read and
  // dropped; the session and its locks stay.
  virtual void forget_queries() noexcept = 0;
  // Interrupts a query that blocks in the server before the session is dropped, where closing
  // the connection does not (PostgreSQL); by default nothing.
  virtual void cancel() noexcept {}
  virtual bool busy() const noexcept = 0;
  virtual bool connecting() const noexcept = 0;
  // The connection's socket (-1: none), whose close ends the session and its locks.
  virtual int descriptor() const noexcept = 0;

  // Called once when the connection ends, before the answers it still owes (which fail).
  void on_end(std::function<void(const Error&)> ended) { m_on_end = std::move(ended); }
  // The connection ended (or never came up); broken_error() says how.
  bool broken() const noexcept { return m_broken.has_value(); }
  const Error& broken_error() const { return *m_broken; }
  // Whether this process opened it (not a fork's inherited copy).
  bool owned() const noexcept { return ::getpid() == m_owner; }
  const std::string& shown() const noexcept { return m_shown; }

protected:
  // shown: the URL without its password, for messages.
  explicit Session(std::string shown) : m_owner(::getpid()), m_shown(std::move(shown)) {}
  // Notes the end, once, and tells the on_end callback.
  void ended(const Error& error);

  pid_t m_owner = 0;
  std::string m_shown;
  std::optional<Error> m_broken;

private:
  std::function<void(const Error&)> m_on_end;
};

// A session whose queries wait in a queue and go one at a time; each answer goes to its
// callback, which may put the query's next step at the front of the queue. Query: the
// database's query, with a callback `done` that takes its Answer&.
template<class Query, class Answer> class QueuedSession : public Session {
public:
  void forget_queries() noexcept override
  {
    m_queue.clear();
    if (m_current) {
      m_current->done = nullptr;
    }
  }

protected:
  using Session::Session;

  // Ends the session with error: every query owed an answer is answered with it.
  virtual void fail(const Error& error) = 0;

  // Queues q; first: before whatever is queued (an op's next step).
  void add(Query q, bool first)
  {
    if (first) {
      m_queue.push_front(std::move(q));
    } else {
      m_queue.push_back(std::move(q));
    }
  }
  // Hands answer to the callback of the query in flight, which is done.
  void finish(Answer& answer)
  {
    std::optional<Query> done = std::move(m_current);
    m_current.reset();
    if (done && done->done) {
      done->done(answer);
    }
  }
  // Answers the query in flight (in_flight: it is owed an answer) and every queued one with
  // a copy of failed. Callbacks may queue follow-ups, which fail in turn.
  void fail_queries(const Answer& failed, bool in_flight)
  {
    std::deque<Query> owed;
    if (in_flight && m_current) {
      owed.push_back(std::move(*m_current));
    }
    m_current.reset();
    while (!owed.empty() || !m_queue.empty()) {
      if (owed.empty()) {
        owed.swap(m_queue);
      }
      Query q = std::move(owed.front());
      owed.pop_front();
      Answer answer = failed;
      if (q.done) {
        q.done(answer);
      }
    }
  }
  // For watch: whether the session ended; if so, the queries queued since are answered.
  bool watch_ended(util::EventLoop& loop)
  {
    if (!m_broken) {
      return false;
    }
    if (!m_queue.empty()) {
      fail(*m_broken); // answers queries queued after the end
      loop.wake_at(util::monotonic_now());
    }
    return true;
  }

  std::optional<Query> m_current; // in flight
  std::deque<Query> m_queue;
};

// A column's text as an integer; Error(internal) naming server ("PostgreSQL", "MySQL")
// when it is not one.
std::int64_t parse_number(std::string_view value, std::string_view server);

} // namespace dlock::sql
