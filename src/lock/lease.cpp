#include "lock/lease.hpp"

#include <algorithm>

namespace dlock::lock {

using util::Millis;
using util::TimePoint;

Millis LeasePolicy::renew_interval() const { return ttl / 3; }

Millis LeasePolicy::retry_interval() const
{
  return std::clamp(ttl / 10, Millis(50), Millis(1000));
}

Millis LeasePolicy::request_timeout() const { return std::min(ttl / 3, request_limit); }

Millis LeasePolicy::safety_margin() const { return std::clamp(ttl / 20, Millis(50), Millis(500)); }

Millis LeasePolicy::effective_kill_after() const
{
  // SIGTERM must not come before the first renewal could even be attempted.
  Millis room = ttl - drift - renew_interval() - safety_margin();
  return std::clamp(kill_after, Millis(0), std::max(room, Millis(0)));
}

Lease::Lease(LeasePolicy policy, TimePoint acquire_sent_at)
  : m_policy(policy), m_confirmed_from(acquire_sent_at),
    m_next_renewal(acquire_sent_at + policy.renew_interval())
{
}

TimePoint Lease::next_renewal_at() const { return m_next_renewal; }

TimePoint Lease::expires_at() const { return m_confirmed_from + m_policy.ttl - m_policy.drift; }

TimePoint Lease::terminate_at() const { return kill_at() - m_policy.effective_kill_after(); }

TimePoint Lease::kill_at() const { return expires_at() - m_policy.safety_margin(); }

TimePoint Lease::backstop_terminate_at() const
{
  return terminate_at() + m_policy.safety_margin() / 2;
}

TimePoint Lease::backstop_kill_at() const { return kill_at() + m_policy.safety_margin() / 2; }

void Lease::renewal_sent(TimePoint now) { m_in_flight_since = now; }

TimePoint Lease::request_deadline() const
{
  return m_in_flight_since.value_or(m_next_renewal) + m_policy.request_timeout();
}

void Lease::renewal_confirmed()
{
  if (!m_in_flight_since) {
    return;
  }
  m_confirmed_from = std::max(m_confirmed_from, *m_in_flight_since);
  m_next_renewal = m_confirmed_from + m_policy.renew_interval();
  m_in_flight_since.reset();
}

void Lease::renewal_failed(TimePoint now)
{
  m_in_flight_since.reset();
  m_next_renewal = now + m_policy.retry_interval();
}

void Lease::renew_soon(TimePoint now, bool at_once)
{
  if (!m_in_flight_since) {
    m_next_renewal = std::min(m_next_renewal, at_once ? now : now + m_policy.retry_interval());
  }
}

} // namespace dlock::lock
