#include "hold/acquisition.hpp"

#include "util/log.hpp"

#include <algorithm>

namespace dlock::hold {

using util::Millis;
using util::TimePoint;

Acquisition::Acquisition(Clock& clock, lock::Store& store, process::SignalFd& signals,
                         WaitPolicy policy, std::vector<lock::LockName> names,
                         lock::AcquireRequest request)
  : m_clock(clock), m_store(store), m_signals(signals), m_policy(policy), m_names(std::move(names)),
    m_request(std::move(request))
{
}

Acquisition::~Acquisition() = default;

void Acquisition::begin()
{
  // TimePoint::max() stands for "wait forever".
  m_deadline = m_policy.wait ? m_clock.now() + *m_policy.wait : TimePoint::max();
  WaitPolicy wait = m_policy;
  if (m_names.size() > 1 && m_deadline != TimePoint::max()) {
    wait.wait = std::max(Millis(0), std::chrono::duration_cast<Millis>(m_deadline - m_clock.now()));
  }
  m_first = std::make_unique<Waiter>(m_clock, m_store, m_signals, wait);
  m_first->begin_take(m_names.front(), m_request);
}

void Acquisition::cancel()
{
  if (m_first) {
    std::unique_ptr<Waiter> first = std::move(m_first);
    first->cancel();
  }
}

Taken Acquisition::finish()
{
  if (!m_first) {
    begin();
  }
  if (m_names.size() == 1) {
    std::unique_ptr<Waiter> first = std::move(m_first);
    return first->finish_take();
  }
  return take_set();
}

Taken Acquisition::take_set()
{
  // A key held elsewhere is tried once; with --no-wait the conflict is reported as for one key.
  WaitPolicy once = m_policy;
  once.no_wait = true;
  once.live_progress = false;
  once.report_holder = m_policy.no_wait && m_policy.report_holder;
  std::size_t first = 0; // the key waited for (the others are tried once after it)
  while (true) {
    std::vector<std::optional<Taken>> taken(m_names.size());
    std::vector<lock::LockName> held;
    try {
      std::unique_ptr<Waiter> waiter = std::move(m_first);
      if (!waiter) {
        WaitPolicy wait = m_policy;
        if (m_deadline != TimePoint::max()) {
          wait.wait =
            std::max(Millis(0), std::chrono::duration_cast<Millis>(m_deadline - m_clock.now()));
        }
        waiter = std::make_unique<Waiter>(m_clock, m_store, m_signals, wait);
        waiter->begin_take(m_names[first], m_request);
      }
      Taken outcome = waiter->finish_take();
      if (!outcome.acquired || outcome.signal != 0) {
        return outcome;
      }
      taken[first] = outcome;
      held.push_back(m_names[first]);
      std::optional<std::size_t> busy;
      std::string busy_holder;
      for (std::size_t i = 0; i < m_names.size() && !busy; ++i) {
        if (i == first) {
          continue;
        }
        Taken next = Waiter(m_clock, m_store, m_signals, once).take(m_names[i], m_request);
        if (!next.acquired) {
          busy = i;
          busy_holder = std::move(next.held_by);
          break;
        }
        taken[i] = next;
        held.push_back(m_names[i]);
      }
      if (!busy) {
        Taken all{true, 0, TimePoint::max(), std::nullopt, 0, {}};
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
      release_all(m_store, held, m_request.token, m_policy.request_timeout);
      if (m_policy.no_wait || m_clock.now() >= m_deadline) {
        return Taken{.held_by = std::move(busy_holder)};
      }
      first = *busy;
    } catch (...) {
      try {
        release_all(m_store, held, m_request.token, m_policy.request_timeout);
      } catch (const Error&) {
        // each expires within its lease
      }
      throw;
    }
  }
}

bool release_all(lock::Store& store, const std::vector<lock::LockName>& names,
                 const std::string& token, Millis request_timeout)
{
  bool all_held = true;
  std::optional<Error> failed;
  for (const lock::LockName& name : names) {
    try {
      store.start_release(name, token);
      lock::Outcome released = lock::await_outcome(store, lock::Outcome::Op::release,
                                                   util::deadline_after(request_timeout));
      all_held = released.held && all_held;
      if (released.kept_for > Millis(0)) {
        util::log_verbose("lock '{}' stays taken for {} more (--min-hold)", name.str(),
                          util::format_duration(released.kept_for));
      }
    } catch (const Error& error) {
      failed = failed.value_or(error);
    }
  }
  if (failed) {
    throw *failed;
  }
  return all_held;
}

} // namespace dlock::hold
