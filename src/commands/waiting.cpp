#include "commands/waiting.hpp"

#include "util/event_loop.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

namespace dlock::commands {

using namespace std::chrono_literals;
using util::Millis;
using util::TimePoint;

namespace {

TimePoint now() { return util::monotonic_now(); }

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
        if (*sig == SIGTSTP && process::job_control()) {
          // Ctrl-Z while waiting: stop as any command would, and go on waiting after fg/bg.
          progress.clear();
          process::stop_like(SIGTSTP);
          progress.redraw();
        } else if (*sig == SIGTSTP) {
          util::log_verbose("SIGTSTP ignored while waiting: no job control (no terminal, or "
                            "not in its foreground) to continue dlock and its caller");
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

namespace {

// holder_text, with the holder's command or with its identity alone.
std::string holder_text(const lock::AcquireResult& result, bool with_lease, bool with_command)
{
  if (result.lease == lock::AcquireResult::Lease::fair_queue) {
    return "no one (earlier --fair waiters go first)";
  }
  if (result.lease == lock::AcquireResult::Lease::writer_first) {
    return "no one (a waiting exclusive holder goes first)";
  }
  std::string text = with_command ? result.holder.describe() : result.holder.identity();
  if (result.holders > 1) {
    text += fmt::format(" and {} other holder{}", result.holders - 1, result.holders > 2 ? "s" : "");
  }
  if (with_lease && result.lease == lock::AcquireResult::Lease::ends
      && result.holder_ttl > Millis(0)) {
    text += fmt::format(", lease ends in {}", util::format_duration(result.holder_ttl));
  }
  return text;
}

} // namespace

std::string holder_text(const lock::AcquireResult& result, bool with_lease)
{
  return holder_text(result, with_lease, true);
}

std::string holder_for_log(const lock::AcquireResult& result)
{
  return holder_text(result, true, false);
}

Progress::Progress(const WaitPolicy& policy, std::string subject)
  : m_policy(policy), m_subject(std::move(subject)), m_start(now())
{
}

Progress::~Progress() { clear(); }

void Progress::update(std::string shown, const std::string& reported)
{
  m_shown = std::move(shown);
  if (m_policy.live_progress) {
    redraw();
  } else if (m_policy.report_holder && !m_reported) {
    util::log_warning("waiting for {}, {}", m_subject, reported);
  }
  m_reported = true;
}

void Progress::redraw()
{
  if (!m_policy.live_progress || m_shown.empty()) {
    return;
  }
  auto waited = std::chrono::duration_cast<std::chrono::seconds>(now() - m_start);
  std::string text = fmt::format("dlock: waiting for {} ({}s), {}", m_subject, waited.count(), m_shown);
  std::string line = fmt::format("\r{}\x1b[K", util::utf8_prefix_chars(text, line_room()));
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  m_drawn = true;
}

void Progress::clear()
{
  if (m_drawn) {
    static constexpr std::string_view erase = "\r\x1b[K";
    ssize_t ignored = ::write(STDERR_FILENO, erase.data(), erase.size());
    (void)ignored;
    m_drawn = false;
  }
}

Outage::Outage(const WaitPolicy& policy, std::string subject)
  : m_policy(policy), m_subject(std::move(subject))
{
}

bool Outage::ride_out(const Error& error, TimePoint deadline)
{
  if (error.code() != ExitCode::unavailable || !m_reached || m_policy.no_wait || now() >= deadline) {
    return false;
  }
  if (!m_during) {
    m_during = true;
    util::log_warning("lost the lock store while waiting for {} ({}); trying again{}", m_subject,
                      error.what(), m_policy.wait ? " until --wait runs out" : "");
  }
  return true;
}

int Outage::pause(lock::Store& store, process::SignalFd& signals, TimePoint deadline,
                  Progress& progress)
{
  store.abandon();
  int signal = 0;
  wait_for_wake(store, signals, std::min(deadline, now() + 1s), progress, signal);
  return signal;
}

void Outage::over()
{
  if (m_during) {
    util::log_warning("reached the lock store again ({})", m_subject);
  }
  m_during = false;
  m_reached = true;
}

std::optional<lock::Outcome> await_attempt(lock::Store& store, lock::Outcome::Op op,
                                           TimePoint answer_deadline, TimePoint deadline,
                                           bool may_ride_out, Outage& outage,
                                           process::SignalFd& signals, Progress& progress,
                                           int& signal)
{
  try {
    lock::Outcome answer = lock::await_outcome(store, op, answer_deadline);
    outage.over();
    return answer;
  } catch (const Error& error) {
    if (!may_ride_out || !outage.ride_out(error, deadline)) {
      throw;
    }
  }
  signal = outage.pause(store, signals, deadline, progress);
  return std::nullopt;
}

int block_for_wake(lock::Store& store, const lock::LockName& name, const lock::WaitTicket& ticket,
                   Millis block, TimePoint deadline, const WaitPolicy& policy,
                   process::SignalFd& signals, Progress& progress, Outage& outage)
{
  store.start_wait_for_wake(name, ticket, block);
  TimePoint until = std::min(deadline, now() + block + policy.request_timeout);
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
  case Woken::signal:
    store.abandon();
    return signal;
  }
  return 0;
}

} // namespace dlock::commands
