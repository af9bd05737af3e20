#include "hold/waiter.hpp"

#include "util/log.hpp"
#include "util/random.hpp"
#include "util/text.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

namespace dlock::hold {

using namespace std::chrono_literals;
using util::Millis;
using util::TimePoint;

namespace {

// The longest single block of a lock waiter; the store says less while a lease runs.
constexpr Millis lock_block = 30s;

// Characters the redrawn line may take: the terminal's width (read at each redraw, so a resize
// is followed) minus one, because a line that fills the last column or wraps can no longer be
// erased from its start with "\r".
std::size_t line_room()
{
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1) {
    return size.ws_col - 1u;
  }
  return 79;
}

// who_holds, with the holder's command or with its identity alone.
std::string describe_holders(const lock::AcquireResult& result, bool with_lease, bool with_command)
{
  if (result.lease == lock::AcquireResult::Lease::fair_queue) {
    return "no one (earlier --fair waiters go first)";
  }
  if (result.lease == lock::AcquireResult::Lease::writer_first) {
    return "no one (a waiting exclusive holder goes first)";
  }
  std::string who = with_command ? result.holder.describe() : result.holder.identity();
  if (!with_command && !result.holder.note.empty()) {
    who += ", note: " + util::printable(result.holder.note); // the holder's own words
  }
  if (result.lease == lock::AcquireResult::Lease::lock_delay) {
    return fmt::format("no one ({} ended without a release; --lock-delay keeps it closed{})",
                       result.holder.host.empty() ? std::string("its last holder") : who,
                       with_lease ? " for " + util::format_duration(result.holder_ttl) + " more"
                                  : std::string());
  }
  std::string text = who;
  if (result.holders > 1) {
    text +=
      fmt::format(" and {} other holder{}", result.holders - 1, result.holders > 2 ? "s" : "");
  }
  if (result.lease == lock::AcquireResult::Lease::min_hold) {
    text += with_lease ? fmt::format(", command ended, kept by --min-hold for {} more",
                                     util::format_duration(result.holder_ttl))
                       : std::string(", command ended, kept by --min-hold");
  }
  if (with_lease && result.lease == lock::AcquireResult::Lease::ends
      && result.holder_ttl > Millis(0)) {
    text += fmt::format(", lease ends in {}", util::format_duration(result.holder_ttl));
  }
  if (result.replace_asked) {
    text += ", asked to stand down (--replace)";
  }
  return text;
}

// lock::await_outcome on the waiter's clock: the outcome of the last operation started, an op
// one; throws its error, or the store's timed_out() at the deadline.
lock::Outcome await_on(Clock& clock, lock::Store& store, lock::Outcome::Op op, TimePoint deadline)
{
  while (true) {
    if (std::optional<lock::Outcome> outcome = store.next_outcome()) {
      if (outcome->op != op) {
        continue;
      }
      if (outcome->error) {
        throw *outcome->error;
      }
      return std::move(*outcome);
    }
    if (clock.now() >= deadline) {
      throw store.timed_out();
    }
    util::EventLoop loop;
    store.watch(loop);
    clock.wait(loop, deadline);
  }
}

} // namespace

void require_policy(const lock::Store& store, const lock::LockPolicy& policy)
{
  if (policy.min_hold > Millis(0)) {
    lock::require(store, lock::Feature::min_hold);
  }
  if (policy.lock_delay > Millis(0)) {
    lock::require(store, lock::Feature::lock_delay);
  }
  if (policy.replace) {
    lock::require(store, lock::Feature::replace);
  }
  if (policy.supersede) {
    lock::require(store, lock::Feature::supersede);
  }
}

WaitPolicy make_wait_policy(bool no_wait, bool fair, std::optional<Millis> wait,
                            Millis request_timeout)
{
  WaitPolicy policy;
  policy.no_wait = no_wait;
  policy.fair = fair;
  policy.wait = wait;
  policy.request_timeout = request_timeout;
  bool terminal = ::isatty(STDERR_FILENO) == 1;
  util::Verbosity verbosity = util::verbosity();
  policy.report_holder =
    verbosity == util::Verbosity::verbose || (verbosity == util::Verbosity::normal && terminal);
  policy.live_progress = verbosity != util::Verbosity::quiet && terminal && !no_wait;
  return policy;
}

std::string who_holds(const lock::AcquireResult& result, bool with_lease)
{
  return describe_holders(result, with_lease, true);
}

std::string who_holds_for_log(const lock::AcquireResult& result)
{
  if (result.superseded_by) {
    return "superseded by a newer waiter, " + result.superseded_by->identity();
  }
  return describe_holders(result, true, false);
}

// The "waiting for SUBJECT" line: redrawn in place on a terminal (with the time waited), one
// line with -v elsewhere (once, the first time the state is known).
class Waiter::Progress {
public:
  Progress(Clock& clock, const WaitPolicy& policy, std::string subject)
    : m_clock(clock), m_policy(policy), m_subject(std::move(subject)), m_start(clock.now())
  {
  }
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  const std::string& subject() const noexcept { return m_subject; }

  // What stands in the way now: shown for the redrawn line, reported for the single line.
  void update(std::string shown, const std::string& reported)
  {
    m_shown = std::move(shown);
    if (m_policy.live_progress) {
      redraw();
    } else if (m_policy.report_holder && !m_reported) {
      util::log_warning("waiting for {}, {}", m_subject, reported);
    }
    m_reported = true;
  }

  void redraw()
  {
    if (!m_policy.live_progress || m_shown.empty()) {
      return;
    }
    auto waited = std::chrono::duration_cast<std::chrono::seconds>(m_clock.now() - m_start);
    std::string text =
      fmt::format("dlock: waiting for {} ({}s), {}", m_subject, waited.count(), m_shown);
    std::string line = fmt::format("\r{}\x1b[K", util::utf8_prefix_chars(text, line_room()));
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
    m_drawn = true;
  }

  void clear()
  {
    if (m_drawn) {
      static constexpr std::string_view erase = "\r\x1b[K";
      ssize_t ignored = ::write(STDERR_FILENO, erase.data(), erase.size());
      (void)ignored;
      m_drawn = false;
    }
  }

private:
  Clock& m_clock;
  const WaitPolicy& m_policy;
  std::string m_subject;
  TimePoint m_start;
  std::string m_shown;
  bool m_reported = false;
  bool m_drawn = false;
};

// A waiter's view of the lock store going away after it answered once (a restart, a
// failover, a network blip): the waiter keeps trying until its --wait runs out, instead of
// failing (69) as it does when the store cannot be reached at all.
class Waiter::Outage {
public:
  Outage(Clock& clock, const WaitPolicy& policy, std::string subject)
    : m_clock(clock), m_policy(policy), m_subject(std::move(subject))
  {
  }

  // Whether to wait out this error (the store unavailable, after it answered once, while
  // waiting is allowed); says so once per outage.
  bool ride_out(const Error& error, TimePoint deadline)
  {
    if (error.code() != ExitCode::unavailable || !m_reached || m_policy.no_wait
        || m_clock.now() >= deadline) {
      return false;
    }
    if (!m_during) {
      m_during = true;
      util::log_warning("lost the lock store while waiting for {} ({}); trying again{}", m_subject,
                        error.what(), m_policy.wait ? " until --wait runs out" : "");
    }
    return true;
  }

  // The store answered.
  void over()
  {
    if (m_during) {
      util::log_warning("reached the lock store again ({})", m_subject);
    }
    m_during = false;
    m_reached = true;
  }

private:
  Clock& m_clock;
  const WaitPolicy& m_policy;
  std::string m_subject;
  bool m_reached = false; // the store answered at least once
  bool m_during = false;  // in an outage, reported
};

// What one attempt found: the way through, or what stands in it.
struct Reading {
  bool through = false;
  std::string shown;    // for the redrawn line
  std::string reported; // for the one-time line and the time-out's
  Millis block{0};      // how long the store says to block for a wake-up
  bool give_up = false; // shut for good (a newer --supersede waiter): waiting is over

  static Reading open() { return Reading{true, {}, {}, Millis(0)}; }
  static Reading shut(std::string shown, std::string reported, Millis block)
  {
    return Reading{false, std::move(shown), std::move(reported), block};
  }
};

// What a Waiter waits for: how an attempt is sent and its answer read.
class Waiter::Way {
public:
  virtual ~Way() = default;
  // What the progress lines call it: "lock 'x'", "barrier 'x'".
  virtual std::string subject() const = 0;
  // The ticket's mode and the longest single block.
  virtual lock::WaitMode mode() const = 0;
  virtual Millis block_cap() const = 0;
  virtual lock::Outcome::Op op() const = 0;
  // Starts one attempt, registering ticket in the same step if the way is shut.
  virtual void start(lock::Store& store, const lock::WaitTicket& ticket) = 0;
  // Reads an attempt's answer (keeping what the next attempt must send in ticket); throws the
  // caller's mistakes.
  virtual Reading read(const lock::Outcome& answer, lock::WaitTicket& ticket) = 0;
  // The answer to an attempt whose caller failed meanwhile: gives back what it took.
  virtual void cancel(const lock::Outcome& answer) { (void)answer; }
  // Whether a waiter interrupted by a signal withdraws (store_away: the signal came while the
  // store was being ridden out).
  virtual bool withdraws_on_signal(bool store_away) const = 0;
  // The ticket's since for the first attempt (a leader watcher's term seen).
  virtual std::int64_t first_since() const { return 0; }
};

namespace {

// A lock to take.
class LockWay final : public Waiter::Way {
public:
  LockWay(Clock& clock, lock::Store& store, const WaitPolicy& policy, const lock::LockName& name,
          const lock::AcquireRequest& request)
    : m_clock(clock), m_store(store), m_policy(policy), m_name(name), m_request(request)
  {
  }

  std::string subject() const override { return fmt::format("lock '{}'", m_name.str()); }
  lock::WaitMode mode() const override
  {
    return m_policy.no_wait ? lock::WaitMode::once
           : m_policy.fair  ? lock::WaitMode::fair
                            : lock::WaitMode::wait;
  }
  Millis block_cap() const override { return lock_block; }
  lock::Outcome::Op op() const override { return lock::Outcome::Op::acquire; }
  void start(lock::Store& store, const lock::WaitTicket& ticket) override
  {
    m_request.ticket = ticket;
    store.start_acquire(m_name, m_request);
  }

  Reading read(const lock::Outcome& answer, lock::WaitTicket& ticket) override
  {
    const lock::AcquireResult& result = answer.acquire;
    ticket.registered = !result.acquired && mode() != lock::WaitMode::once;
    refuse_other_kind(result);
    if (result.acquired && answer.replicas_acknowledged.value_or(0) < m_policy.replicas.replicas) {
      // A failover now could hand the lock to someone else: do not use it.
      give_back();
      throw Error(ExitCode::unavailable,
                  "lock '{}' reached {} of {} replicas within {} (--wait-replicas); released it",
                  m_name.str(), answer.replicas_acknowledged.value_or(0),
                  m_policy.replicas.replicas, util::format_duration(m_policy.replicas.timeout));
    }
    if (result.acquired) {
      return Reading::open();
    }
    if (result.superseded_by) {
      Reading reading = Reading::shut(
        {}, "superseded by a newer waiter, " + result.superseded_by->describe(), Millis(0));
      reading.give_up = true;
      return reading;
    }
    return Reading::shut("held by " + who_holds(result, false), "held by " + who_holds(result),
                         result.block);
  }

  void cancel(const lock::Outcome& answer) override
  {
    refuse_other_kind(answer.acquire);
    if (answer.acquire.acquired) {
      give_back();
    }
  }

  bool withdraws_on_signal(bool) const override { return mode() != lock::WaitMode::once; }

private:
  void refuse_other_kind(const lock::AcquireResult& result) const
  {
    if (result.kind_in_use) {
      throw Error(ExitCode::usage,
                  "lock '{}' is held as {}, which {} cannot share: every holder of a key must ask "
                  "for the same kind",
                  m_name.str(), result.kind_in_use->describe(), m_policy.kind.describe());
    }
  }

  // Gives back a lock just taken that cannot be used; if the store does not answer, it expires.
  void give_back()
  {
    try {
      m_store.start_release(m_name, m_request.token);
      await_on(m_clock, m_store, lock::Outcome::Op::release,
               m_clock.now() + m_policy.request_timeout);
    } catch (const Error&) {
    }
  }

  Clock& m_clock;
  lock::Store& m_store;
  const WaitPolicy& m_policy;
  lock::LockName m_name;
  lock::AcquireRequest m_request;
};

// A gate to pass: a lock to be free, a barrier, a latch.
class GateWay final : public Waiter::Way {
public:
  GateWay(const lock::LockName& name, Gate gate) : m_name(name), m_gate(std::move(gate)) {}

  std::string subject() const override { return m_gate.subject; }
  lock::WaitMode mode() const override { return m_gate.request.ticket.mode; }
  Millis block_cap() const override { return m_gate.block_cap; }
  lock::Outcome::Op op() const override { return lock::Outcome::Op::gate; }
  void start(lock::Store&, const lock::WaitTicket& ticket) override
  {
    m_gate.request.ticket = ticket;
    m_gate.coordination->start_gate(m_name, m_gate.request); // the one coordination call of a wait
  }

  Reading read(const lock::Outcome& answer, lock::WaitTicket& ticket) override
  {
    const lock::GateResult& result = answer.gate;
    if (result.open) {
      return Reading::open();
    }
    if (mode() == lock::WaitMode::barrier && result.parties != m_gate.request.parties) {
      throw Error(ExitCode::usage,
                  "barrier '{}' is in progress with --parties {}: every party must give the same "
                  "N (got {})",
                  m_name.str(), result.parties, m_gate.request.parties);
    }
    ticket.since = result.since;
    ticket.generation = result.generation;
    Reading reading = Reading::shut({}, {}, result.block);
    switch (mode()) {
    case lock::WaitMode::watch:
      reading.shown = "held by " + who_holds(result.lock, false);
      reading.reported = "held by " + who_holds(result.lock);
      break;
    case lock::WaitMode::barrier:
      reading.shown = fmt::format("{} of {} parties arrived", result.arrived, result.parties);
      reading.reported = reading.shown;
      break;
    case lock::WaitMode::latch:
      reading.shown =
        result.count < 0 ? std::string("not set yet") : fmt::format("count {}", result.count);
      reading.reported = reading.shown;
      break;
    case lock::WaitMode::leader: // dlock leader --watch says nothing while nothing changes
    case lock::WaitMode::once:
    case lock::WaitMode::wait:
    case lock::WaitMode::fair:
      break;
    }
    return reading;
  }

  // A barrier party withdraws, so that the others do not pass the barrier counting a party
  // gone (not while the store is away: its arrival lapses); watchers hold no place.
  bool withdraws_on_signal(bool store_away) const override
  {
    return !store_away && mode() == lock::WaitMode::barrier;
  }
  std::int64_t first_since() const override { return m_gate.request.ticket.since; }

private:
  lock::LockName m_name;
  Gate m_gate;
};

} // namespace

// How a wait ended, before the caller's view of it.
struct Waiter::End {
  bool through = false;
  int signal = 0;
  std::optional<lock::Outcome> last{}; // the last answer
};

// The answer to the attempt in flight: nullopt when the store was ridden out (try again), with
// the signal that ended the pause.
struct Waiter::Answer {
  std::optional<lock::Outcome> outcome;
  int signal = 0;
};

enum class Waiter::Woken { outcome, deadline, signal };

Waiter::Waiter(Clock& clock, lock::Store& store, process::SignalFd& signals, WaitPolicy policy)
  : m_clock(clock), m_store(store), m_signals(signals), m_policy(policy)
{
}

Waiter::~Waiter() = default;

void Waiter::begin_take(const lock::LockName& name, const lock::AcquireRequest& request)
{
  // TimePoint::max() stands for "wait forever"; the deadline runs from before the checks.
  m_deadline = m_policy.wait ? m_clock.now() + *m_policy.wait : TimePoint::max();
  if (m_policy.fair) {
    lock::require(m_store, lock::Feature::fair);
  }
  if (m_policy.kind.mode == lock::LockKind::Mode::shared) {
    lock::require(m_store, lock::Feature::shared);
  }
  if (m_policy.kind.mode == lock::LockKind::Mode::limit) {
    lock::require(m_store, lock::Feature::limit);
  }
  if (m_policy.replicas.replicas > 0) {
    lock::require(m_store, lock::Feature::replicas);
  }
  require_policy(m_store, request.policy);
  lock::AcquireRequest sent = request;
  sent.ack = m_policy.replicas;
  sent.kind = m_policy.kind;
  begin(name, std::make_unique<LockWay>(m_clock, m_store, m_policy, name, sent));
  send();
}

void Waiter::cancel()
{
  if (!m_in_flight) {
    return;
  }
  m_in_flight = false;
  lock::Outcome answer =
    await(m_way->op(), m_sent_at + m_policy.request_timeout + m_policy.replicas.timeout);
  m_way->cancel(answer);
}

Taken Waiter::finish_take()
{
  End end = wait();
  if (end.signal != 0) {
    return Taken{.signal = end.signal};
  }
  const lock::AcquireResult& result = end.last->acquire;
  if (end.through) {
    return Taken{true, result.fence, m_sent_at, result.validity, 0, {result.fence}};
  }
  return Taken{.held_by = who_holds_for_log(result),
               .superseded = result.superseded_by.has_value()};
}

Taken Waiter::take(const lock::LockName& name, const lock::AcquireRequest& request)
{
  begin_take(name, request);
  return finish_take();
}

Passed Waiter::pass(const lock::LockName& name, const Gate& gate)
{
  m_deadline = m_policy.wait ? m_clock.now() + *m_policy.wait : TimePoint::max();
  begin(name, std::make_unique<GateWay>(name, gate));
  End end = wait();
  return Passed{end.through, end.signal, end.last ? end.last->gate.since : 0};
}

void Waiter::begin(const lock::LockName& name, std::unique_ptr<Way> way)
{
  m_name = name;
  m_way = std::move(way);
  m_ticket = lock::WaitTicket{};
  m_ticket.mode = m_way->mode();
  m_ticket.since = m_way->first_since();
  m_ticket.waiter_id = util::random_token().substr(0, 16);
  m_progress = std::make_unique<Progress>(m_clock, m_policy, m_way->subject());
  m_outage = std::make_unique<Outage>(m_clock, m_policy, m_way->subject());
}

void Waiter::send()
{
  m_sent_at = m_clock.now();
  Millis cap = m_way->block_cap();
  m_ticket.max_block =
    m_deadline == TimePoint::max()
      ? cap
      : std::clamp(std::chrono::duration_cast<Millis>(m_deadline - m_sent_at), Millis(1), cap);
  m_way->start(m_store, m_ticket);
  m_in_flight = true;
}

Waiter::End Waiter::wait()
{
  while (true) {
    if (!m_in_flight) {
      send();
    }
    Answer attempt = answer();
    if (!attempt.outcome) {
      if (attempt.signal != 0) {
        if (m_way->withdraws_on_signal(true)) {
          withdraw();
        }
        return End{false, attempt.signal};
      }
      continue;
    }
    Reading reading = m_way->read(*attempt.outcome, m_ticket);
    if (reading.through) {
      m_progress->clear();
      return End{true, 0, std::move(attempt.outcome)};
    }
    if (m_policy.no_wait || reading.give_up || m_clock.now() >= m_deadline) {
      m_progress->clear();
      if (m_ticket.mode != lock::WaitMode::once && withdraw()) {
        return End{true, 0, std::move(attempt.outcome)}; // a barrier that tripped meanwhile
      }
      if (reading.give_up) {
        // asked for with --supersede: said unless -q, in CI logs too (not a terminal)
        if (util::verbosity() != util::Verbosity::quiet) {
          util::log_warning("gave up waiting for {}: {}", m_progress->subject(), reading.reported);
        }
      } else if (m_policy.report_holder) {
        if (m_policy.no_wait) {
          util::log_warning("{} is {}", m_progress->subject(), reading.reported);
        } else {
          util::log_warning("gave up waiting for {} after {}: {}", m_progress->subject(),
                            util::format_duration(*m_policy.wait), reading.reported);
        }
      }
      return End{false, 0, std::move(attempt.outcome)};
    }
    m_progress->update(std::move(reading.shown), reading.reported);
    int signal = block_for_wake(reading.block);
    if (signal != 0) {
      if (m_way->withdraws_on_signal(false)) {
        withdraw();
      }
      return End{false, signal};
    }
  }
}

Waiter::Answer Waiter::answer()
{
  m_in_flight = false;
  try {
    lock::Outcome outcome =
      await(m_way->op(), m_sent_at + m_policy.request_timeout + m_policy.replicas.timeout);
    m_outage->over();
    return Answer{std::move(outcome)};
  } catch (const Error& error) {
    if (!m_outage->ride_out(error, m_deadline)) {
      throw;
    }
  }
  return Answer{std::nullopt, pause()};
}

int Waiter::block_for_wake(Millis block)
{
  m_store.start_wait_for_wake(*m_name, m_ticket, block);
  TimePoint until = std::min(m_deadline, m_clock.now() + block + m_policy.request_timeout);
  Woken woken = Woken::outcome;
  try {
    woken = sleep_until(until);
  } catch (const Error& error) {
    if (!m_outage->ride_out(error, m_deadline)) {
      throw;
    }
    woken = pause() != 0 ? Woken::signal : Woken::outcome;
  }
  switch (woken) {
  case Woken::outcome:
    break; // woken by a release, or the block ended: try again
  case Woken::deadline:
    m_store.abandon(); // give up the wait; the last attempt starts afresh
    break;
  case Woken::signal:
    m_store.abandon();
    return m_signal;
  }
  return 0;
}

Waiter::Woken Waiter::sleep_until(TimePoint until)
{
  m_signal = 0;
  TimePoint next_redraw = m_clock.now() + 1s;
  while (true) {
    while (std::optional<lock::Outcome> outcome = m_store.next_outcome()) {
      if (outcome->op != lock::Outcome::Op::wait_for_wake) {
        continue;
      }
      if (outcome->error) {
        throw *outcome->error;
      }
      return Woken::outcome;
    }
    TimePoint t = m_clock.now();
    if (t >= until) {
      return Woken::deadline;
    }
    if (t >= next_redraw) {
      m_progress->redraw();
      next_redraw = t + 1s;
    }
    util::EventLoop loop;
    loop.watch(m_signals.fd(), POLLIN, [&](short) {
      while (m_signal == 0) {
        std::optional<int> sig = m_signals.read();
        if (!sig) {
          break;
        }
        if (*sig == SIGTSTP && process::job_control()) {
          // Ctrl-Z while waiting: stop as any command would, and go on waiting after fg/bg.
          m_progress->clear();
          process::stop_like(SIGTSTP);
          m_progress->redraw();
        } else if (*sig == SIGTSTP) {
          util::log_verbose("SIGTSTP ignored while waiting: no job control (no terminal, or "
                            "not in its foreground) to continue dlock and its caller");
        } else if (*sig != SIGCHLD && *sig != SIGCONT) {
          m_signal = *sig;
        }
      }
    });
    m_store.watch(loop);
    m_clock.wait(loop, std::min(until, next_redraw));
    if (m_signal != 0) {
      return Woken::signal;
    }
  }
}

int Waiter::pause()
{
  // Drops what is in flight and pauses (a second at most) before the next attempt.
  m_store.abandon();
  sleep_until(std::min(m_deadline, m_clock.now() + 1s));
  return m_signal;
}

bool Waiter::withdraw()
{
  // Forgets the waiter (a store that queues waiters, etcd's keys, would otherwise keep its
  // place until the registration expires); a barrier party whose barrier tripped first has
  // passed it (true).
  try {
    m_store.start_withdraw(*m_name, m_ticket);
    return await(lock::Outcome::Op::withdraw, m_clock.now() + m_policy.request_timeout).gate.open;
  } catch (const Error&) {
    return false; // the registration lapses by itself within seconds
  }
}

lock::Outcome Waiter::await(lock::Outcome::Op op, TimePoint deadline)
{
  return await_on(m_clock, m_store, op, deadline);
}

} // namespace dlock::hold
