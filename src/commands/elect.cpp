#include "commands/elect.hpp"

#include "lock/features.hpp"
#include "process/signals.hpp"
#include "util/duration.hpp"
#include "util/log.hpp"

#include <poll.h>

#include <algorithm>
#include <chrono>

namespace dlock::commands {

namespace {

using namespace std::chrono_literals;

// A term shorter than this is followed by a pause as long, so that a command that fails at
// once does not take and give back the leadership in a tight loop (systemd's RestartSec).
constexpr util::Millis restart_pause = 1s;

// The longest pause before campaigning again at a store that went away: the pause doubles from
// restart_pause with each failure in a row, so that an outage of hours is not a warning a second.
constexpr util::Millis longest_store_pause = 30s;

// Sleeps for pause unless a signal that ends dlock comes first: 0, or that signal.
int pause_unless_signalled(util::Millis pause)
{
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT});
  pollfd fd{.fd = signals.fd(), .events = POLLIN, .revents = 0};
  const util::TimePoint until = util::monotonic_now() + pause;
  for (util::TimePoint now = util::monotonic_now(); now < until; now = util::monotonic_now()) {
    auto left = std::chrono::duration_cast<util::Millis>(until - now);
    if (::poll(&fd, 1, static_cast<int>(left.count()) + 1) > 0) {
      if (std::optional<int> sig = signals.read()) {
        return *sig;
      }
    }
  }
  return 0;
}

// Ends dlock as a term ended by sig would have: dies of SIGINT and SIGQUIT, else 128+sig.
int end_by_signal(int sig)
{
  if (process::stops_calling_script(sig)) {
    process::die_of_signal(sig, false);
  }
  return 128 + sig;
}

} // namespace

int elect(Context& context, const ElectOptions& options)
{
  lock::require(context.store, lock::Feature::elect); // before anything is sent
  ElectOptions candidate = options;
  if (candidate.value.empty()) {
    candidate.value = lock::HolderInfo::current("").identity();
  }
  util::Millis store_pause = restart_pause;
  while (true) {
    const util::TimePoint began = util::monotonic_now();
    RunEnd end;
    try {
      end = run_term(context, candidate);
    } catch (const Error& error) {
      // A campaign outlives a store that went away; every other failure is the caller's.
      if (!candidate.keep_campaigning || error.code() != ExitCode::unavailable) {
        throw;
      }
      util::log_warning("{}; campaigning again for '{}' in {}", error.what(),
                        candidate.keys.front().str(), util::format_duration(store_pause));
      context.store.abandon();
      if (int sig = pause_unless_signalled(store_pause); sig != 0) {
        return end_by_signal(sig);
      }
      store_pause = std::min(store_pause * 2, longest_store_pause);
      continue;
    }
    store_pause = restart_pause; // the store answered: a next outage starts from the shortest
    if (!candidate.keep_campaigning || end.stop_asked || end.die_of != 0) {
      if (end.die_of != 0) {
        process::die_of_signal(end.die_of, end.to_group);
      }
      return end.status;
    }
    util::log_verbose("the term ended (exit status {}); campaigning again for '{}'", end.status,
                      candidate.keys.front().str());
    if (util::monotonic_now() - began < restart_pause) {
      if (int sig = pause_unless_signalled(restart_pause); sig != 0) {
        return end_by_signal(sig);
      }
    }
  }
}

} // namespace dlock::commands
