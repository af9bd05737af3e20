#include "commands/acquire_wait.hpp"

#include "util/event_loop.hpp"
#include "util/log.hpp"
#include "util/random.hpp"
#include "util/text.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>

namespace dlock::commands {

using namespace std::chrono_literals;
using util::Millis;
using util::TimePoint;

namespace {

TimePoint now() { return util::monotonic_now(); }

// Who holds the lock; with_lease adds the remaining lease (not for the redrawn line, where
// it would go stale).
std::string holder_text(const lock::AcquireResult& result, bool with_lease = true)
{
  if (result.holder_ttl_ms == -2) {
    return "no one (earlier --fair waiters go first)";
  }
  if (result.holder_ttl_ms == -3) {
    return "no one (a waiting exclusive holder goes first)";
  }
  std::string text = result.holder.describe();
  if (result.holders > 1) {
    text += fmt::format(" and {} other holder{}", result.holders - 1, result.holders > 2 ? "s" : "");
  }
  if (with_lease && result.holder_ttl_ms > 0) {
    text += fmt::format(", lease ends in {}", util::format_duration(Millis(result.holder_ttl_ms)));
  }
  return text;
}

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

// The "waiting for lock" line: redrawn in place on a terminal, one line with -v elsewhere.
class Progress {
public:
  Progress(const WaitPolicy& policy, std::string name)
    : m_policy(policy), m_name(std::move(name)), m_start(now())
  {
  }
  ~Progress() { clear(); }

  void held_by(const lock::AcquireResult& result)
  {
    m_holder = holder_text(result, false);
    if (m_policy.live_progress) {
      redraw();
    } else if (m_policy.report_holder && !m_reported) {
      util::log_warning("waiting for lock '{}', held by {}", m_name, holder_text(result));
    }
    m_reported = true;
  }

  void redraw()
  {
    if (!m_policy.live_progress || m_holder.empty()) {
      return;
    }
    auto waited = std::chrono::duration_cast<std::chrono::seconds>(now() - m_start);
    std::string text = fmt::format("dlock: waiting for lock '{}' ({}s), held by {}", m_name,
                                   waited.count(), m_holder);
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
  const WaitPolicy& m_policy;
  std::string m_name;
  TimePoint m_start;
  std::string m_holder;
  bool m_reported = false;
  bool m_drawn = false;
};

// Gives back a lock just taken that cannot be used; if the store does not answer, it expires.
void release_quietly(lock::Store& store, const lock::LockName& name, const std::string& token,
                     Millis request_timeout)
{
  try {
    store.start_release(name, token);
    lock::await_outcome(store, lock::Outcome::Op::release, util::deadline_after(request_timeout));
  } catch (const Error&) {
  }
}

enum class Woken { outcome, deadline, signal };

// Waits for the outcome of the wait started on the store, a signal, or until; redraws the
// progress line each second.
Woken wait_for_wake(lock::Store& store, process::SignalFd& signals, TimePoint until,
                    Progress& progress, int& signal)
{
  auto next_redraw = now() + 1s;
  while (true) {
    while (std::optional<lock::Outcome> outcome = store.next_outcome()) {
      if (outcome->op != lock::Outcome::Op::wait_for_wake) {
        continue;
      }
      if (outcome->error) {
        throw *outcome->error;
      }
      return Woken::outcome;
    }
    TimePoint t = now();
    if (t >= until) {
      return Woken::deadline;
    }
    if (t >= next_redraw) {
      progress.redraw();
      next_redraw = t + 1s;
    }
    util::EventLoop loop;
    loop.watch(signals.fd(), POLLIN, [&](short) {
      while (signal == 0) {
        std::optional<int> sig = signals.read();
        if (!sig) {
          break;
        }
        if (*sig == SIGTSTP) {
          // Ctrl-Z while waiting: stop as any command would, and go on waiting after fg/bg.
          progress.clear();
          process::stop_like(SIGTSTP);
          progress.redraw();
        } else if (*sig != SIGCHLD && *sig != SIGCONT) {
          signal = *sig;
        }
      }
    });
    store.watch(loop);
    loop.wake_at(std::min(until, next_redraw));
    loop.wait();
    if (signal != 0) {
      return Woken::signal;
    }
  }
}

// A waiter's view of the lock store going away after it answered once (a restart, a
// failover, a network blip): the waiter keeps trying until its --wait runs out, instead of
// failing (69) as it does when the store cannot be reached at all.
class Outage {
public:
  Outage(const WaitPolicy& policy, std::string name) : m_policy(policy), m_name(std::move(name)) {}

  // Whether to wait out this error (the store unavailable, after it answered once, while
  // waiting is allowed); says so once per outage.
  bool ride_out(const Error& error, TimePoint deadline)
  {
    if (error.code() != ExitCode::unavailable || !m_reached || m_policy.no_wait || now() >= deadline) {
      return false;
    }
    if (!m_during) {
      m_during = true;
      util::log_warning("lost the lock store while waiting for lock '{}' ({}); trying again{}",
                        m_name, error.what(),
                        m_policy.wait ? " until --wait runs out" : "");
    }
    return true;
  }
  // Drops what is in flight and pauses (a second at most) before the next attempt; returns
  // the signal that ended the pause, or 0.
  int pause(lock::Store& store, process::SignalFd& signals, TimePoint deadline, Progress& progress)
  {
    store.abandon();
    int signal = 0;
    wait_for_wake(store, signals, std::min(deadline, now() + 1s), progress, signal);
    return signal;
  }
  // The store answered.
  void over()
  {
    if (m_during) {
      util::log_warning("reached the lock store again (lock '{}')", m_name);
    }
    m_during = false;
    m_reached = true;
  }

private:
  const WaitPolicy& m_policy;
  std::string m_name;
  bool m_reached = false; // the store answered at least once
  bool m_during = false;  // in an outage, reported
};

} // namespace

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
  policy.report_holder = verbosity == util::Verbosity::verbose
                         || (verbosity == util::Verbosity::normal && terminal);
  policy.live_progress = verbosity != util::Verbosity::quiet && terminal && !no_wait;
  return policy;
}

WaitOutcome acquire_with_wait(Context& context, const lock::LockName& name,
                              const std::string& token, Millis ttl, const lock::HolderInfo& me,
                              const WaitPolicy& policy, process::SignalFd& signals,
                              const std::function<void()>& overlap)
{
  // TimePoint::max() stands for "wait forever".
  const TimePoint deadline = policy.wait ? now() + *policy.wait : TimePoint::max();
  lock::Store& store = context.store;
  if (policy.fair && !store.keeps_fair_queue()) {
    throw Error(ExitCode::usage, "--fair needs a single lock store: independent masters (Redlock, "
                                 "several --url) cannot keep one queue of waiters");
  }
  if (policy.kind.has_slots() && !store.counts_holders()) {
    throw Error(ExitCode::usage, "--shared and --limit need a single lock store: independent "
                                 "masters (Redlock, several --url) cannot agree on a count of holders");
  }
  lock::AcquireRequest request{token, ttl, me, {}, policy.replicas, policy.kind};
  lock::WaitTicket& ticket = request.ticket;
  ticket.mode = policy.no_wait ? lock::WaitMode::once
                : policy.fair  ? lock::WaitMode::fair
                               : lock::WaitMode::wait;
  ticket.waiter_id = util::random_token().substr(0, 16);
  Progress progress(policy, name.str());
  Outage outage(policy, name.str());
  bool overlap_pending = static_cast<bool>(overlap);
  while (true) {
    TimePoint sent_at = now();
    ticket.max_block = deadline == TimePoint::max()
                         ? Millis(30'000)
                         : std::clamp(std::chrono::duration_cast<Millis>(deadline - sent_at),
                                      Millis(1), Millis(30'000));
    store.start_acquire(name, request);
    std::optional<Error> overlap_failed;
    if (overlap_pending) {
      overlap_pending = false;
      try {
        overlap();
      } catch (const Error& error) {
        overlap_failed = error;
      }
    }
    lock::Outcome answer;
    try {
      answer = lock::await_outcome(store, lock::Outcome::Op::acquire,
                                   sent_at + policy.request_timeout + policy.replicas.timeout);
    } catch (const Error& error) {
      if (overlap_failed || !outage.ride_out(error, deadline)) {
        throw;
      }
      if (int signal = outage.pause(store, signals, deadline, progress); signal != 0) {
        return WaitOutcome{.signal = signal};
      }
      continue;
    }
    outage.over();
    const lock::AcquireResult& result = answer.acquire;
    if (result.kind_in_use) {
      progress.clear();
      throw Error(ExitCode::usage,
                  "lock '{}' is held as {}, which {} cannot share: every holder of a key must ask "
                  "for the same kind",
                  name.str(), result.kind_in_use->describe(), policy.kind.describe());
    }
    if (overlap_failed) {
      if (result.acquired) {
        release_quietly(store, name, token, policy.request_timeout);
      }
      throw *overlap_failed;
    }
    if (result.acquired && answer.replicas_acknowledged.value_or(0) < policy.replicas.replicas) {
      // A failover now could hand the lock to someone else: do not use it.
      progress.clear();
      release_quietly(store, name, token, policy.request_timeout);
      throw Error(ExitCode::unavailable,
                  "lock '{}' reached {} of {} replicas within {} (--wait-replicas); released it",
                  name.str(), answer.replicas_acknowledged.value_or(0), policy.replicas.replicas,
                  util::format_duration(policy.replicas.timeout));
    }
    if (result.acquired) {
      progress.clear();
      return WaitOutcome{true, result.fence, sent_at, result.validity, 0, {result.fence}};
    }
    TimePoint t = now();
    if (policy.no_wait || t >= deadline) {
      progress.clear();
      if (policy.report_holder) {
        if (policy.no_wait) {
          util::log_warning("lock '{}' is held by {}", name.str(), holder_text(result));
        } else {
          util::log_warning("gave up waiting for lock '{}' after {}: held by {}",
                            name.str(), util::format_duration(*policy.wait),
                            holder_text(result));
        }
      }
      if (!policy.no_wait) {
        try {
          store.start_withdraw(name, ticket);
          lock::await_outcome(store, lock::Outcome::Op::withdraw, util::deadline_after(policy.request_timeout));
        } catch (const Error&) {
          // the registration expires by itself within seconds
        }
      }
      return WaitOutcome{};
    }
    progress.held_by(result);
    store.start_wait_for_wake(name, ticket, result.block);
    TimePoint until = std::min(deadline, t + result.block + policy.request_timeout);
    int signal = 0;
    Woken woken = Woken::outcome;
    try {
      woken = wait_for_wake(store, signals, until, progress, signal);
    } catch (const Error& error) {
      if (!outage.ride_out(error, deadline)) {
        throw;
      }
      signal = outage.pause(store, signals, deadline, progress);
      woken = signal != 0 ? Woken::signal : Woken::outcome;
    }
    switch (woken) {
    case Woken::outcome:
      break; // woken by a release, or the block ended: try again
    case Woken::deadline:
      store.abandon(); // give up the wait; the last attempt starts afresh
      break;
    case Woken::signal: {
      store.abandon();
      WaitOutcome outcome;
      outcome.signal = signal;
      return outcome;
    }
    }
  }
}

WaitOutcome acquire_all_with_wait(Context& context, const std::vector<lock::LockName>& names,
                                  const std::string& token, Millis ttl,
                                  const lock::HolderInfo& me, const WaitPolicy& policy,
                                  process::SignalFd& signals,
                                  const std::function<void()>& overlap)
{
  if (names.size() == 1) {
    return acquire_with_wait(context, names.front(), token, ttl, me, policy, signals, overlap);
  }
  const TimePoint deadline = policy.wait ? now() + *policy.wait : TimePoint::max();
  // A key held elsewhere is tried once; with --no-wait the conflict is reported as for one key.
  WaitPolicy once = policy;
  once.no_wait = true;
  once.live_progress = false;
  once.report_holder = policy.no_wait && policy.report_holder;
  std::size_t first = 0; // the key waited for (the others are tried once after it)
  bool overlapped = false;
  while (true) {
    std::vector<std::optional<WaitOutcome>> taken(names.size());
    std::vector<lock::LockName> held;
    try {
      WaitPolicy wait = policy;
      if (deadline != TimePoint::max()) {
        wait.wait = std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - now()));
      }
      WaitOutcome outcome = acquire_with_wait(context, names[first], token, ttl, me, wait, signals,
                                              overlapped ? std::function<void()>() : overlap);
      overlapped = true;
      if (!outcome.acquired || outcome.signal != 0) {
        return outcome;
      }
      taken[first] = outcome;
      held.push_back(names[first]);
      std::optional<std::size_t> busy;
      for (std::size_t i = 0; i < names.size() && !busy; ++i) {
        if (i == first) {
          continue;
        }
        WaitOutcome next = acquire_with_wait(context, names[i], token, ttl, me, once, signals);
        if (!next.acquired) {
          busy = i;
          break;
        }
        taken[i] = next;
        held.push_back(names[i]);
      }
      if (!busy) {
        WaitOutcome all{true, 0, TimePoint::max(), std::nullopt, 0, {}};
        for (const auto& one : taken) {
          all.fences.push_back(one->fence);
          all.sent_at = std::min(all.sent_at, one->sent_at);
          if (one->validity) {
            all.validity = std::min(all.validity.value_or(Millis::max()), *one->validity);
          }
        }
        all.fence = all.fences.front();
        return all;
      }
      // Give back what was taken before waiting: never hold one key while waiting for another.
      release_all(context, held, token);
      if (policy.no_wait || now() >= deadline) {
        return WaitOutcome{};
      }
      first = *busy;
    } catch (...) {
      try {
        release_all(context, held, token);
      } catch (const Error&) {
        // each expires within its lease
      }
      throw;
    }
  }
}

bool release_all(Context& context, const std::vector<lock::LockName>& names,
                 const std::string& token)
{
  bool all_held = true;
  std::optional<Error> failed;
  for (const lock::LockName& name : names) {
    try {
      context.store.start_release(name, token);
      all_held = lock::await_outcome(context.store, lock::Outcome::Op::release,
                                     util::deadline_after(context.request_timeout))
                   .held
                 && all_held;
    } catch (const Error& error) {
      failed = failed.value_or(error);
    }
  }
  if (failed) {
    throw *failed;
  }
  return all_held;
}

} // namespace dlock::commands
