#include "commands/acquire_wait.hpp"

#include "util/log.hpp"
#include "util/random.hpp"

#include <poll.h>

#include <algorithm>

namespace dlock::commands {

using namespace std::chrono_literals;
using util::Millis;

namespace {

// Sleeps until `until` or a signal other than SIGCHLD; returns that signal, or 0.
int sleep_interruptibly(process::SignalFd& signals, util::TimePoint until)
{
  while (true) {
    auto left = std::chrono::duration_cast<Millis>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return 0;
    }
    pollfd pfd{signals.fd(), POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(left.count()) + 1);
    while (auto sig = signals.read()) {
      if (*sig != SIGCHLD) {
        return *sig;
      }
    }
  }
}

std::string holder_text(const lock::AcquireResult& result)
{
  std::string text = result.holder.describe();
  if (result.holder_ttl_ms > 0) {
    text += fmt::format(", lease ends in {}", util::format_duration(Millis(result.holder_ttl_ms)));
  }
  return text;
}

} // namespace

WaitOutcome acquire_with_wait(lock::LockClient& client, const std::string& token, Millis ttl,
                              const lock::HolderInfo& me, const WaitPolicy& policy,
                              process::SignalFd& signals)
{
  const auto start = std::chrono::steady_clock::now();
  // TimePoint::max() stands for "wait forever".
  const util::TimePoint deadline = policy.wait ? start + *policy.wait : util::TimePoint::max();
  Millis backoff = 20ms;
  bool reported = false;
  while (true) {
    auto sent_at = std::chrono::steady_clock::now();
    lock::AcquireResult result =
      client.try_acquire(token, ttl, me, sent_at + policy.request_timeout);
    if (result.acquired) {
      return WaitOutcome{true, result.fence, sent_at, 0};
    }
    auto now = std::chrono::steady_clock::now();
    bool give_up = policy.no_wait || now >= deadline;
    if (policy.report_holder && (give_up || !reported)) {
      if (give_up && !policy.no_wait) {
        util::log_warning("gave up waiting for lock '{}' after {}: held by {}",
                          client.keys().name, util::format_duration(*policy.wait),
                          holder_text(result));
      } else {
        util::log_warning("lock '{}' is held by {}", client.keys().name, holder_text(result));
      }
      reported = true;
    }
    if (give_up) {
      return WaitOutcome{};
    }
    // Full jitter in [backoff/2, backoff*3/2), never past the holder's lease or our deadline.
    Millis pause = backoff / 2 + Millis(util::random_below(static_cast<std::uint64_t>(backoff.count()) + 1));
    if (result.holder_ttl_ms > 0) {
      pause = std::min(pause, Millis(result.holder_ttl_ms));
    }
    backoff = std::min<Millis>(backoff * 2, 1s);
    auto until = std::min(now + pause, deadline);
    if (int sig = sleep_interruptibly(signals, until); sig != 0) {
      WaitOutcome outcome;
      outcome.signal = sig;
      return outcome;
    }
  }
}

} // namespace dlock::commands
