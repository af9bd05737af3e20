#pragma once

#include "lock/store.hpp"
#include "stores/sql/coordination.hpp"
#include "stores/sql/history.hpp"
#include "stores/sql/policy.hpp"
#include "stores/sql/session.hpp"
#include "stores/sql/session_store.hpp"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace dlock::sql {

// The step chain PostgreSQL and MySQL share. Each lock name has a session of its own, whose
// session holds the lock; an acquisition reads the session's limits (once), tries the lock,
// takes a fencing token from dlock_fence or reports the holder; a wait blocks in the server;
// a renewal confirms that the session still holds the lock; a release lets go of it, or with
// --force (or another process's token) ends the holding session. The chain and the per-name
// bookkeeping are here; each database writes the steps (its SQL and client calls), which
// are the virtual methods below, and its own status and list.
// What must outlive the holder's session (--min-hold, --lock-delay, a --replace request, the
// newest --supersede waiter, the --note PostgreSQL's application_name cannot hold) is the
// lock's side record in dlock_policy (policy.hpp): an acquirer reads it right after it takes
// the session lock and gives the lock back if the record closes it; a renewal reads it for a
// replace request; a release by token keeps or removes it. Without the table (no right to
// create it) plain locking goes on, and the policies that need it are refused in one line.
// The waiters that take nothing (wait, barrier, latch) are the database's gates
// (coordination.hpp), whose wake-ups and withdrawals this chain hands on to them; a release
// tells the lock's watchers before it is answered.
// Each lock's history is rows of dlock_history (history.hpp), written on the lock's session:
// a failed write (no right to create the table) is answered as such and changes nothing else.
class SqlStore : public SessionStore, public lock::History {
public:
  void start_acquire(const lock::LockName& name, const lock::AcquireRequest& request) override;
  void start_wait_for_wake(const lock::LockName& name, const lock::WaitTicket& ticket,
                           util::Millis block) override;
  void start_renew(const lock::LockName& name, const lock::RenewRequest& request) override;
  void start_release(const lock::LockName& name, const std::string& token) override;
  // A gate's waiter (wait, barrier, latch) is the gates' to forget; a lock waiter, nothing.
  void start_withdraw(const lock::LockName& name, const lock::WaitTicket& ticket) override;
  lock::Coordination* coordination() noexcept override { return m_gates.get(); }
  lock::History* history() noexcept override { return this; }
  // On the name's session when this process has one (the lock's, whose order it keeps), else
  // on the control session; answered at once once the table turned out not to be usable.
  void start_record(const lock::LockName& name, const std::string& text) override;
  // On the control session; a table another tenant changed (or none) gives no events.
  std::vector<std::string> events(const lock::LockName& name, std::size_t limit,
                                  util::TimePoint deadline) override;

  void watch(util::EventLoop& loop) override;
  // The sockets of the sessions that hold a lock.
  std::vector<int> lease_descriptors() const override;
  // Keeps every session that holds a lock (ending it would free the lock under a running
  // command); the others are cancelled and closed, which ends a wait in the server.
  void abandon() noexcept override;
  Error timed_out() noexcept override;

protected:
  // One lock name's session, and what it holds.
  struct Named {
    std::unique_ptr<Session> session;
    std::string prefixed;              // prefix + name, as kept in dlock_fence
    lock::LockKind kind{};             // as the last acquisition asked
    std::string token;                 // of the last acquisition
    lock::HolderInfo holder;           // of the last acquisition
    bool held = false;                 // the session holds the lock (granted, not let go)
    bool granted_by_wait = false;      // held through a wait, not yet answered as acquired
    bool closing = false;              // released: the session ends once idle
    bool limit_read = false;           // the server's settings were read
    std::optional<SessionLimit> limit; // the soonest the server may end the session
    // The last attempt found the lock closed by a side record (min-hold, lock-delay) until
    // then: a wait is a timed one, not in the server (where the lock is free to take).
    std::optional<util::TimePoint> closed_until;
    std::optional<util::TimePoint> wake_at; // a timed wait in progress: answered then
    util::Millis kept_for{0};               // the release in progress keeps it this long
  };
  // The side record of a lock as read (dlock_policy), with the server's clock.
  struct PolicyRead {
    std::optional<Error> error{};       // the query failed
    std::optional<Error> unavailable{}; // no table, and none could be made (why, as an Error)
    std::optional<PolicyRow> row{};
    std::int64_t now = 0; // the server's clock, Unix ms
  };
  using PolicyThen = std::function<void(PolicyRead)>;
  // One write of the side record.
  struct PolicyWrite {
    enum class Kind {
      claim,   // this session's holder: token_fp, holder, hold_until, delay_ms (the rest reset)
      stamp,   // ended_at = now where the record is token_fp's and not stamped yet
      keep,    // token_fp released before its hold_until: released, the delay disarmed
      drop,    // token_fp's record goes (clean release)
      force,   // release --force: no min-hold; an armed delay counts from now
      replace, // asks the holder whose session is session to go (holder: the replacer)
      newest,  // waiter (holder: who) is the newest --supersede waiter, for lifetime_ms more
      sweep,   // removes the records of every lock that is free and that nothing keeps closed
    };
    Kind kind = Kind::claim;
    std::string token_fp{};
    std::string holder{}; // encode_holder
    std::int64_t hold_until = 0;
    std::int64_t delay_ms = 0;
    std::int64_t session = 0;
    std::int64_t ended_at = 0; // force: when the holder ended (0: now)
    std::string waiter{};      // newest
    std::int64_t lifetime_ms = 0;
  };
  // What a read of dlock_history found: the texts, newest first, cut at history_read_bytes;
  // or the error, which is the caller's too when refused (an untrusted table).
  struct HistoryRead {
    std::optional<Error> error{};
    bool refused = false;
    std::vector<std::string> texts{};
  };
  using RecordThen = std::function<void(const std::optional<Error>&)>;
  // How many rows it touched, or the error.
  using WriteThen = std::function<void(const std::optional<Error>&, std::int64_t)>;
  using Op = lock::Outcome::Op;

  // server: "PostgreSQL" or "MySQL", as messages name it; shown: the URL without secrets;
  // idle_timeout_setting: as SessionStore.
  SqlStore(std::string server, std::string shown, std::string prefix,
           std::string idle_timeout_setting);

  // The steps each database writes. Each answers its operation on a failure (answer(op,
  // error)) and otherwise goes on with the chain's next step, named on it.
  // Opens a session for the lock name n (n.prefixed, n.token and n.holder are set).
  virtual std::unique_ptr<Session> open_session(const Named& n) = 0;
  // Opens the session for status, list, --force and tokens held by another process.
  virtual std::unique_ptr<Session> open_control() = 0;
  // Reads the session's settings, then limit_found().
  virtual void read_limit(const std::string& name, const lock::AcquireRequest& request) = 0;
  // Runs once a new session's limit is read, before its first try; by default nothing.
  virtual void before_first_try(const std::string&, std::function<void()> then) { then(); }
  // Tries the lock without waiting, then tried().
  virtual void try_lock(const std::string& name, const lock::AcquireRequest& request) = 0;
  // Once the lock is taken, before the fencing token; by default nothing.
  virtual void after_taken(const std::string&, std::function<void()> then) { then(); }
  // Counts the lock's fencing token up in dlock_fence, then fenced() or no_fencing(); again:
  // the table was created or looked for once already in this acquisition.
  virtual void take_fence(const std::string& name, bool again) = 0;
  // Reads who holds the lock, then holders_found().
  virtual void report_holder(const std::string& name, const lock::AcquireRequest& request) = 0;
  // Blocks in the server for at most block until the lock is this session's, then granted()
  // and woken(), or woken() alone.
  virtual void wait_in_server(const std::string& name, util::Millis block) = 0;
  // Asks whether the name's session still holds the lock, then held_confirmed().
  virtual void confirm_held(const std::string& name) = 0;
  // Asks whether the session of another process that has token holds the lock, then
  // other_confirmed().
  virtual void confirm_other(const lock::LockName& name, const std::string& token) = 0;
  // Lets go of the lock the name's session holds, then released().
  virtual void unlock(const std::string& name) = 0;
  // --force (no token) or a token another process holds: ends the holding session, then
  // holder_ended().
  virtual void end_holder(const lock::LockName& name, const std::string& token) = 0;
  // Reads the lock's side record on the name's session (or control, for a name not taken
  // here); create: makes the table first if there is none.
  virtual void read_policy(const std::string& name, bool control, bool create, PolicyThen then) = 0;
  // Writes the lock's side record on the name's session (or control).
  virtual void write_policy(const std::string& name, bool control, const PolicyWrite& write,
                            WriteThen then) = 0;
  // The side records of every lock name of this prefix (the name without it), with the
  // server's clock, on the control session (blocking until deadline); none without the table.
  struct NamedPolicy {
    std::string name;
    PolicyRow row;
  };
  virtual std::vector<NamedPolicy> list_policies(util::TimePoint deadline, std::int64_t& now) = 0;
  // Gives back the lock the name's session has just taken, without an answer.
  virtual void let_go(const std::string& name) = 0;
  // Appends text to the name's rows of dlock_history on the name's session (or control),
  // making the table first if there is none; sets m_no_history when it cannot be used.
  virtual void write_history(const std::string& name, bool control, const std::string& text,
                             RecordThen then) = 0;
  // The name's newest texts of dlock_history (at most limit) on the control session.
  virtual void read_history(const std::string& name, std::size_t limit,
                            std::function<void(HistoryRead)> then) = 0;

  // The chain's steps that the database's steps go on with.
  // The session's limit is known: checks the TTL against it, then tries the lock.
  void limit_found(const std::string& name, const lock::AcquireRequest& request,
                   std::optional<SessionLimit> limit);
  // taken: the lock is this session's now (else another holds it).
  void tried(const std::string& name, const lock::AcquireRequest& request, bool taken);
  // Takes the fencing token, unless dlock_fence turned out not to be writable.
  void fence(const std::string& name, bool again);
  // Answers the acquisition: taken, with fencing token fence (0: none).
  void fenced(std::int64_t fence);
  // The same for the name's acquisition, after a candidate of dlock elect (a holder with a
  // value) told the lock's leader watchers (SqlGates::elected): a plain run pays nothing.
  void fenced(const std::string& name, std::int64_t fence);
  // dlock_fence cannot be used (why, for -v): the lock is taken without a token, from now on.
  void no_fencing(const std::string& why);
  // The same for the name's acquisition (its leader watchers told, as fenced(name, fence)).
  void no_fencing(const std::string& name, const std::string& why);
  // Answers the acquisition: held by count sessions, the first of them first (its session
  // id: first_session), after the side record adds its note and takes a --replace request.
  void holders_found(const std::string& name, const lock::AcquireRequest& request,
                     const lock::HolderInfo* first, std::int64_t count,
                     std::int64_t first_session = 0);
  // The wait ended with the lock this session's.
  void granted(const std::string& name);
  // Answers the wait: error, or woken (granted or timed out in the server).
  void woken(std::optional<Error> error = std::nullopt);
  // Answers the renewal: held or not, or error (which a session that ended turns into lost).
  void held_confirmed(const std::string& name, const std::optional<Error>& error, bool held);
  void other_confirmed(const std::optional<Error>& error, bool held);
  // Answers the release: held (it was let go) or not, or error; ended: the session went with
  // the lock, which is no error.
  void released(const std::string& name, const std::optional<Error>& error, bool ended, bool held);
  // end_holder's answer, once the side record is written (forced: no token was given).
  void holder_ended(const lock::LockName& name, const std::string& token, lock::Outcome outcome);
  // Adds the side record to a status (holder_session: the session that holds the lock, when
  // held): the holder's note; a lock held for a min-hold, or closed by a lock-delay.
  void add_policy(lock::LockStatus& status, std::int64_t holder_session, util::TimePoint deadline);
  // The same for list: found (the held locks, with their holders' sessions) gets the notes,
  // and the locks held for a min-hold alone that match the glob; sorted by name again.
  void add_policies(std::vector<lock::LockStatus>& found,
                    const std::map<std::string, std::int64_t>& sessions, std::string_view pattern,
                    util::TimePoint deadline);
  // One side record into a status (see add_policy).
  static void apply_policy(lock::LockStatus& status, std::int64_t holder_session,
                           const PolicyRow& row, std::int64_t now);

  Named* find(const lock::LockName& name);
  Session& control_session();
  // The name's session, or the control session, as the database's open_session or
  // open_control made it (S: its session type).
  template<class S> S& session_as(const std::string& name)
  {
    return static_cast<S&>(*m_named.at(name).session);
  }
  template<class S> S& control_as() { return static_cast<S&>(control_session()); }
  // Waits on the control session until answered() or deadline (then throws timed_out()).
  void block_until(const std::function<bool()>& answered, util::TimePoint deadline);

  std::string m_server;
  std::string m_shown;
  std::string m_prefix;
  std::map<std::string, Named> m_named; // by lock name
  std::unique_ptr<Session> m_control;
  bool m_fencing = true;             // false once dlock_fence turned out not writable
  std::optional<Error> m_no_policy;  // why dlock_policy cannot be used, once it turned out so
  std::optional<Error> m_no_history; // why dlock_history cannot be used, once it turned out so
  std::unique_ptr<SqlGates>
    m_gates; // wait, barrier, latch (coordination.hpp), if the database has them

private:
  // The name's session, opened for token if there is none this process can use.
  Named& named(const lock::LockName& name, const std::string& token, const lock::HolderInfo& me);
  // Whether the TTL is within the session's limit; if not, the acquisition is refused.
  bool ttl_allowed(const std::string& name, const lock::AcquireRequest& request);
  // With the session lock just taken: reads the side record; gives the lock back and answers
  // if a min-hold or lock-delay closes it, else records this holder and takes the fence.
  void check_policy(const std::string& name, const lock::AcquireRequest& request);
  // Answers an attempt that was not granted (outcome), after a --supersede waiter announced
  // itself (its first registration) or learned that a newer one did (row: the side record).
  void answer_waiter(const std::string& name, const lock::AcquireRequest& request,
                     const std::optional<PolicyRow>& row, std::int64_t now, lock::Outcome outcome);
  // Gives the lock back and answers the acquisition with error.
  void refuse(const std::string& name, const Error& error);
  // The error for a policy the side record is needed for when it cannot be used.
  Error policy_refused(const lock::AcquireRequest& request) const;
};

} // namespace dlock::sql
