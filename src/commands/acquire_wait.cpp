#include "commands/acquire_wait.hpp"

#include "util/log.hpp"
#include "util/random.hpp"

#include <algorithm>

namespace dlock::commands {

using util::Millis;
using util::TimePoint;

namespace {

TimePoint now() { return util::monotonic_now(); }

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

// Forgets a waiter that gives up (a signal): a store that queues waiters (etcd's keys) would
// otherwise keep its place until the registration expires, ahead of everyone else.
void withdraw_quietly(lock::Store& store, const lock::LockName& name, const lock::WaitTicket& ticket,
                      Millis request_timeout)
{
  if (ticket.mode == lock::WaitMode::once) {
    return;
  }
  try {
    store.start_withdraw(name, ticket);
    lock::await_outcome(store, lock::Outcome::Op::withdraw, util::deadline_after(request_timeout));
  } catch (const Error&) {
    // the registration expires by itself
  }
}

} // namespace

WaitOutcome acquire_with_wait(Context& context, const lock::LockName& name,
                              const std::string& token, Millis ttl, const lock::HolderInfo& me,
                              const WaitPolicy& policy, process::SignalFd& signals,
                              const std::function<void()>& overlap)
{
  // TimePoint::max() stands for "wait forever".
  const TimePoint deadline = policy.wait ? now() + *policy.wait : TimePoint::max();
  lock::Store& store = context.store;
  if (policy.fair) {
    lock::require(store, lock::Feature::fair);
  }
  if (policy.kind.mode == lock::LockKind::Mode::shared) {
    lock::require(store, lock::Feature::shared);
  }
  if (policy.kind.mode == lock::LockKind::Mode::limit) {
    lock::require(store, lock::Feature::limit);
  }
  if (policy.replicas.replicas > 0) {
    lock::require(store, lock::Feature::replicas);
  }
  lock::AcquireRequest request{token, ttl, me, {}, policy.replicas, policy.kind};
  lock::WaitTicket& ticket = request.ticket;
  ticket.mode = policy.no_wait ? lock::WaitMode::once
                : policy.fair  ? lock::WaitMode::fair
                               : lock::WaitMode::wait;
  ticket.waiter_id = util::random_token().substr(0, 16);
  const std::string subject = fmt::format("lock '{}'", name.str());
  Progress progress(policy, subject);
  Outage outage(policy, subject);
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
    int signal = 0;
    std::optional<lock::Outcome> attempt = await_attempt(
      store, lock::Outcome::Op::acquire, sent_at + policy.request_timeout + policy.replicas.timeout,
      deadline, !overlap_failed, outage, signals, progress, signal);
    if (!attempt) {
      if (signal != 0) {
        withdraw_quietly(store, name, ticket, policy.request_timeout);
        return WaitOutcome{.signal = signal};
      }
      continue;
    }
    const lock::Outcome& answer = *attempt;
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
      WaitOutcome given_up;
      given_up.held_by = holder_for_log(result);
      return given_up;
    }
    progress.update("held by " + holder_text(result, false), "held by " + holder_text(result));
    signal = block_for_wake(store, name, ticket, result.block, deadline, policy, signals, progress,
                            outage);
    if (signal != 0) {
      withdraw_quietly(store, name, ticket, policy.request_timeout);
      return WaitOutcome{.signal = signal};
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
      std::string busy_holder;
      for (std::size_t i = 0; i < names.size() && !busy; ++i) {
        if (i == first) {
          continue;
        }
        WaitOutcome next = acquire_with_wait(context, names[i], token, ttl, me, once, signals);
        if (!next.acquired) {
          busy = i;
          busy_holder = std::move(next.held_by);
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
        WaitOutcome given_up;
        given_up.held_by = std::move(busy_holder);
        return given_up;
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
