#include "commands/coordinate.hpp"

#include "commands/waiting.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/random.hpp"

#include <algorithm>
#include <cstdio>

namespace dlock::commands {

using namespace std::chrono_literals;
using util::Millis;
using util::TimePoint;

namespace {

TimePoint now() { return util::monotonic_now(); }

// The longest single block of each waiter; a registration lapses 2 s after its block ends.
// A watcher blocks for the holder's remaining lease within this; a barrier party refreshes
// its arrival at least this often, so that the arrival of one that died lapses within 7 s.
constexpr Millis watch_block = 30s;
constexpr Millis barrier_block = 5s;
constexpr Millis latch_block = 30s;


// What stands in the way of a waiter whose gate is shut: for the redrawn line, and for the
// one-time line (and the time-out's), which may say more.
struct Shut {
  std::string shown;
  std::string reported;
};

Shut describe_shut(lock::WaitMode mode, const lock::GateResult& result)
{
  switch (mode) {
  case lock::WaitMode::watch:
    return {"held by " + holder_text(result.lock, false), "held by " + holder_text(result.lock)};
  case lock::WaitMode::barrier: {
    std::string text = fmt::format("{} of {} parties arrived", result.arrived, result.parties);
    return {text, text};
  }
  case lock::WaitMode::latch: {
    std::string text = result.count < 0 ? std::string("not set yet")
                                        : fmt::format("count {}", result.count);
    return {text, text};
  }
  case lock::WaitMode::once:
  case lock::WaitMode::wait:
  case lock::WaitMode::fair:
    break;
  }
  return {};
}

// How a wait at a gate ended.
struct GateEnd {
  bool open = false; // the gate opened (or, for a barrier, tripped before the withdrawal)
  int signal = 0;    // non-zero: interrupted by this signal
};

// Waits until the gate of request.ticket.mode opens, --wait runs out, or a signal, as a lock
// waiter does (acquire_with_wait): each failed attempt registers the waiter in the same step,
// then it blocks for a wake-up (at most the block the store said, within block_cap), with a
// last attempt at the deadline, after which it withdraws.
GateEnd wait_at_gate(Context& context, lock::Coordination& gates, const lock::LockName& name,
                     lock::GateRequest request, Millis block_cap, const WaitPolicy& policy,
                     const std::string& subject, process::SignalFd& signals)
{
  // TimePoint::max() stands for "wait forever".
  const TimePoint deadline = policy.wait ? now() + *policy.wait : TimePoint::max();
  lock::Store& store = context.store;
  lock::WaitTicket& ticket = request.ticket;
  ticket.waiter_id = util::random_token().substr(0, 16);
  Progress progress(policy, subject);
  Outage outage(policy, subject);
  // Withdraws the waiter; a barrier party whose barrier tripped first has passed it.
  auto withdraw = [&] {
    try {
      store.start_withdraw(name, ticket);
      return lock::await_outcome(store, lock::Outcome::Op::withdraw,
                                 util::deadline_after(policy.request_timeout))
        .gate.open;
    } catch (const Error&) {
      return false; // the registration lapses by itself within seconds
    }
  };
  while (true) {
    TimePoint sent_at = now();
    ticket.max_block = deadline == TimePoint::max()
                         ? block_cap
                         : std::clamp(std::chrono::duration_cast<Millis>(deadline - sent_at),
                                      Millis(1), block_cap);
    gates.start_gate(name, request);
    int signal = 0;
    std::optional<lock::Outcome> attempt =
      await_attempt(store, lock::Outcome::Op::gate, sent_at + policy.request_timeout, deadline, true,
                    outage, signals, progress, signal);
    if (!attempt) {
      if (signal != 0) {
        return GateEnd{false, signal};
      }
      continue;
    }
    const lock::GateResult& result = attempt->gate;
    if (result.open) {
      progress.clear();
      return GateEnd{true, 0};
    }
    if (ticket.mode == lock::WaitMode::barrier && result.parties != request.parties) {
      progress.clear();
      throw Error(ExitCode::usage,
                  "barrier '{}' is in progress with --parties {}: every party must give the same "
                  "N (got {})",
                  name.str(), result.parties, request.parties);
    }
    ticket.since = result.since;
    ticket.generation = result.generation;
    Shut shut = describe_shut(ticket.mode, result);
    if (now() >= deadline) {
      progress.clear();
      if (withdraw()) {
        return GateEnd{true, 0};
      }
      if (policy.report_holder) {
        util::log_warning("gave up waiting for {} after {}: {}", subject,
                          util::format_duration(*policy.wait), shut.reported);
      }
      return GateEnd{};
    }
    progress.update(std::move(shut.shown), shut.reported);
    signal = block_for_wake(store, name, ticket, result.block, deadline, policy, signals, progress,
                            outage);
    if (signal != 0) {
      if (ticket.mode == lock::WaitMode::barrier) {
        withdraw(); // so that the others do not pass the barrier counting a party gone
      }
      return GateEnd{false, signal};
    }
  }
}

// The exit status of a wait at a gate; dies of SIGINT and SIGQUIT as acquire's wait does.
int gate_status(const GateEnd& end, int conflict_exit_code)
{
  if (process::stops_calling_script(end.signal)) {
    process::die_of_signal(end.signal, false); // nothing is held; the script stops too
  }
  if (end.signal != 0) {
    return 128 + end.signal;
  }
  return end.open ? 0 : conflict_exit_code;
}

// The signals that end a wait, as for acquire.
process::SignalFd wait_signals()
{
  return process::SignalFd({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
}

// Prints one JSON document on stdout: the latch's name and count.
void print_count(const lock::LockName& name, std::int64_t count)
{
  std::string out = util::JsonObject()
                      .add("version", std::int64_t{1})
                      .add("key", name.str())
                      .add("count", count)
                      .str()
                    + "\n";
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    throw Error(ExitCode::internal, "could not write to stdout");
  }
}

// What a wait says: what it waits for (the progress and time-out lines), and, with -v, that
// its way opened.
struct WaitWords {
  std::string subject;
  std::string opened;
};

// The whole of a wait at a gate (wait, barrier, latch --wait): its signals and policy, the
// wait, and its exit status.
int wait_at(Context& context, lock::Coordination& gates, const lock::LockName& name,
            const lock::GateRequest& request, Millis block_cap, std::optional<Millis> wait,
            int conflict_exit_code, const WaitWords& words)
{
  process::SignalFd signals = wait_signals();
  WaitPolicy policy = make_wait_policy(false, false, wait, context.request_timeout);
  GateEnd end =
    wait_at_gate(context, gates, name, request, block_cap, policy, words.subject, signals);
  if (end.open) {
    util::log_verbose("{}", words.opened);
  }
  return gate_status(end, conflict_exit_code);
}

} // namespace

int wait_until_free(Context& context, const WaitFreeOptions& options)
{
  lock::Coordination& gates = lock::require_coordination(context.store);
  lock::GateRequest request;
  request.ticket.mode = lock::WaitMode::watch;
  return wait_at(context, gates, options.key, request, watch_block, options.wait,
                 options.conflict_exit_code,
                 {fmt::format("lock '{}' to be free", options.key.str()),
                  fmt::format("lock '{}' is free", options.key.str())});
}

int barrier(Context& context, const BarrierOptions& options)
{
  lock::Coordination& gates = lock::require_coordination(context.store);
  lock::GateRequest request;
  request.ticket.mode = lock::WaitMode::barrier;
  request.parties = options.parties;
  return wait_at(context, gates, options.key, request, barrier_block, options.wait,
                 options.conflict_exit_code,
                 {fmt::format("barrier '{}'", options.key.str()),
                  fmt::format("barrier '{}': all {} parties arrived", options.key.str(),
                              options.parties)});
}

int latch(Context& context, const LatchOptions& options)
{
  lock::Coordination& gates = lock::require_coordination(context.store);
  const lock::LockName& name = options.key;
  lock::Store& store = context.store;
  switch (options.action) {
  case LatchOptions::Action::count:
    gates.start_set_latch(name, options.count, options.expire);
    lock::await_outcome(store, lock::Outcome::Op::set_latch,
                        util::deadline_after(context.request_timeout));
    util::log_verbose("latch '{}' set to {} (expires in {})", name.str(), options.count,
                      util::format_duration(options.expire));
    if (options.json) {
      print_count(name, options.count);
    }
    return 0;
  case LatchOptions::Action::down: {
    gates.start_count_down(name);
    std::int64_t left = lock::await_outcome(store, lock::Outcome::Op::count_down,
                                            util::deadline_after(context.request_timeout))
                          .gate.count;
    if (left < 0) {
      throw Error(ExitCode::not_held,
                  "latch '{}' is not set (never set with --count, or expired): nothing to count "
                  "down",
                  name.str());
    }
    if (left == 0) {
      util::log_verbose("latch '{}' is at zero; its waiters go on", name.str());
    } else {
      util::log_verbose("latch '{}': count {}", name.str(), left);
    }
    if (options.json) {
      print_count(name, left);
    }
    return 0;
  }
  case LatchOptions::Action::wait:
    break;
  }
  lock::GateRequest request;
  request.ticket.mode = lock::WaitMode::latch;
  return wait_at(context, gates, name, request, latch_block, options.wait,
                 options.conflict_exit_code,
                 {fmt::format("latch '{}'", name.str()),
                  fmt::format("latch '{}' is at zero", name.str())});
}

} // namespace dlock::commands
