#include "lock/watchdog.hpp"

#include "util/error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace dlock::lock {

using namespace std::chrono_literals;
using util::Millis;
using util::TimePoint;

void Actions::tell(Notice::Kind kind, Millis duration, std::int64_t count)
{
  for (auto& slot : notices) {
    if (!slot) {
      slot = Notice{kind, duration, count};
      return;
    }
  }
}

Actions& Actions::operator+=(const Actions& other)
{
  send_renewal = send_renewal || other.send_renewal;
  abandon_renewal = abandon_renewal || other.abandon_renewal;
  arm_guard = arm_guard || other.arm_guard;
  terminate = terminate || other.terminate;
  kill = kill || other.kill;
  for (const auto& notice : other.notices) {
    if (notice) {
      tell(notice->kind, notice->duration, notice->count);
    }
  }
  return *this;
}

Watchdog::Watchdog(WatchdogPolicy policy, TimePoint acquire_sent_at, TimePoint started)
  : m_policy(policy), m_lease(policy.lease, acquire_sent_at), m_started(started)
{
}

Actions Watchdog::start() const
{
  Actions actions;
  actions.arm_guard = !m_policy.on_lost_ignore;
  return actions;
}

Actions Watchdog::on_time(TimePoint t)
{
  Actions actions;
  if (m_renewing) {
    if (m_lease.in_flight() && t >= m_lease.request_deadline()) {
      actions.abandon_renewal = true;
      actions.tell(Notice::Kind::renewal_timed_out, m_lease.policy().request_timeout());
      m_lease.renewal_failed(t);
    }
    if (!m_lease.in_flight() && t >= m_lease.next_renewal_at()) {
      actions.send_renewal = true;
      m_lease.renewal_sent(t);
    }
  }
  if (!m_lost && !m_policy.on_lost_ignore) {
    if (t >= m_lease.terminate_at()) {
      Millis unconfirmed =
        std::chrono::duration_cast<Millis>(t - (m_lease.expires_at() - m_policy.lease.ttl));
      actions += begin_stop(StopReason::unconfirmed, t);
      if (actions.terminate) {
        actions.tell(Notice::Kind::unconfirmed, unconfirmed);
      }
    }
    if (t >= m_lease.kill_at()) {
      actions += kill();
    }
  }
  if (m_policy.on_lost_ignore && !m_lost && t >= m_lease.expires_at()
      && !m_unconfirmed_past_expiry) {
    m_unconfirmed_past_expiry = true;
    actions.tell(Notice::Kind::maybe_expired);
  }
  if (m_policy.max_hold && t >= m_started + *m_policy.max_hold) {
    Actions stop = begin_stop(StopReason::max_hold, t);
    if (stop.terminate) {
      stop.tell(Notice::Kind::max_hold, *m_policy.max_hold);
    }
    actions += stop;
  }
  if (m_kill_at && t >= *m_kill_at) {
    actions += kill();
  }
  return actions;
}

Actions Watchdog::renewal_confirmed(TimePoint t, std::optional<int> replicas_acknowledged)
{
  Actions actions;
  const ReplicaAck& wanted = m_policy.replicas;
  if (wanted.replicas > 0 && replicas_acknowledged.value_or(0) < wanted.replicas) {
    m_lease.renewal_failed(t);
    if (!m_replicas_short) {
      m_replicas_short = true;
      actions.tell(Notice::Kind::replicas_short, wanted.timeout, wanted.replicas);
    }
    return actions;
  }
  m_replicas_short = false;
  m_lease.renewal_confirmed();
  m_unconfirmed_past_expiry = false;
  actions.arm_guard = !m_stopping && !m_policy.on_lost_ignore;
  actions.tell(Notice::Kind::renewed, m_policy.lease.ttl);
  return actions;
}

Actions Watchdog::renewal_refused(TimePoint t)
{
  m_lease.renewal_failed(t);
  m_renewing = false;
  m_lost = true;
  if (m_policy.on_lost_ignore) {
    Actions actions;
    actions.tell(Notice::Kind::lost_ignored);
    return actions;
  }
  Actions actions = begin_stop(StopReason::lost, t);
  if (actions.terminate) {
    actions.tell(Notice::Kind::lost);
  }
  return actions;
}

Actions Watchdog::renewal_failed(TimePoint t)
{
  m_lease.renewal_failed(t);
  return {};
}

void Watchdog::store_disconnected(TimePoint t, bool lease_ended)
{
  if (m_renewing) {
    m_lease.renew_soon(t, lease_ended);
  }
}

void Watchdog::forget_in_flight(TimePoint t)
{
  if (m_lease.in_flight()) {
    m_lease.renewal_failed(t);
  }
}

Actions Watchdog::guard_stopped(TimePoint t, bool killed)
{
  Actions actions = begin_stop(StopReason::unconfirmed, t);
  if (actions.terminate) {
    actions.tell(Notice::Kind::frozen);
  }
  m_killed = m_killed || killed;
  return actions;
}

Actions Watchdog::begin_stop(StopReason reason, TimePoint t)
{
  // A loss explains the stop better than any other reason, whenever it is found.
  if (m_reason == StopReason::none || reason == StopReason::lost) {
    m_reason = reason;
  }
  Actions actions;
  if (m_stopping) {
    return actions;
  }
  m_stopping = true;
  m_kill_at = t + m_policy.lease.effective_kill_after();
  actions.terminate = true;
  return actions;
}

Actions Watchdog::kill()
{
  Actions actions;
  if (!m_killed) {
    m_killed = true;
    actions.kill = true;
    actions.tell(Notice::Kind::killing);
  }
  return actions;
}

TimePoint Watchdog::next_wakeup(TimePoint t) const
{
  TimePoint next = t + 60s;
  if (m_renewing) {
    next =
      std::min(next, m_lease.in_flight() ? m_lease.request_deadline() : m_lease.next_renewal_at());
  }
  if (!m_lost && !m_policy.on_lost_ignore && !m_killed) {
    next =
      std::min(next, m_reason == StopReason::none ? m_lease.terminate_at() : m_lease.kill_at());
  }
  if (m_policy.on_lost_ignore && !m_lost && !m_unconfirmed_past_expiry) {
    next = std::min(next, m_lease.expires_at());
  }
  if (m_policy.max_hold && m_reason == StopReason::none) {
    next = std::min(next, m_started + *m_policy.max_hold);
  }
  if (m_kill_at && !m_killed) {
    next = std::min(next, *m_kill_at);
  }
  return next;
}

RunVerdict Watchdog::verdict(std::optional<bool> released) const
{
  RunVerdict verdict;
  bool stopped_for_loss = m_reason == StopReason::lost || m_reason == StopReason::unconfirmed;
  bool gone_at_release = released == false;
  if (gone_at_release && !stopped_for_loss && !ran_unprotected()) {
    verdict.notice = Notice{Notice::Kind::lost_before_release};
  }
  // A confirmed release proves the lease never lapsed, even if renewals went unanswered.
  bool unprotected = ran_unprotected() && released != true;
  if (stopped_for_loss || gone_at_release || unprotected) {
    verdict.exit_code = static_cast<int>(ExitCode::lost);
  } else if (m_reason == StopReason::max_hold) {
    verdict.exit_code = static_cast<int>(ExitCode::max_hold);
  }
  return verdict;
}

std::string describe(const Notice& notice, std::string_view name, std::string_view loss_cause)
{
  std::string duration = util::format_duration(notice.duration);
  switch (notice.kind) {
  case Notice::Kind::renewal_timed_out:
    return fmt::format("renewal of lock '{}' got no reply in {}; retrying", name, duration);
  case Notice::Kind::renewed:
    return fmt::format("renewed lease on lock '{}' for {}", name, duration);
  case Notice::Kind::unconfirmed:
    return fmt::format("could not confirm the lease on lock '{}' with the lock store for {}; "
                       "stopping the command before the lease can expire",
                       name, duration);
  case Notice::Kind::maybe_expired:
    return fmt::format("lease on lock '{}' may have expired (the lock store is unreachable); the "
                       "command goes on unprotected (--on-lost ignore)",
                       name);
  case Notice::Kind::lost:
    return fmt::format("lost lock '{}': {}; stopping the command", name, loss_cause);
  case Notice::Kind::lost_ignored:
    return fmt::format("lost lock '{}': {}; the command goes on unprotected (--on-lost ignore)",
                       name, loss_cause);
  case Notice::Kind::frozen:
    return fmt::format("dlock did not confirm the lease on lock '{}' in time (was it frozen?); "
                       "its guard stopped the command before the lease could expire",
                       name);
  case Notice::Kind::max_hold:
    return fmt::format("the command reached --max-hold {}; stopping it", duration);
  case Notice::Kind::killing:
    return "sending SIGKILL to the command and everything it started";
  case Notice::Kind::replicas_short:
    return fmt::format("a renewal of lock '{}' did not reach {} replica(s) within {} "
                       "(--wait-replicas): it does not extend the lease; retrying",
                       name, notice.count, duration);
  case Notice::Kind::lost_before_release:
    return fmt::format("lock '{}' had already been lost when the command ended ({})", name,
                       loss_cause);
  }
  return {};
}

NoticeLevel level(Notice::Kind kind)
{
  switch (kind) {
  case Notice::Kind::renewal_timed_out:
  case Notice::Kind::renewed:
  case Notice::Kind::killing:
    return NoticeLevel::verbose;
  case Notice::Kind::maybe_expired:
  case Notice::Kind::replicas_short:
    return NoticeLevel::warning;
  default:
    return NoticeLevel::error;
  }
}

} // namespace dlock::lock
