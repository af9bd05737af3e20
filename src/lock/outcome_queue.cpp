#include "lock/outcome_queue.hpp"

namespace dlock::lock {

std::optional<Outcome> OutcomeQueue::next()
{
  if (m_ready.empty()) {
    return std::nullopt;
  }
  Outcome outcome = std::move(m_ready.front());
  m_ready.pop_front();
  return outcome;
}

void OutcomeQueue::watch(util::EventLoop& loop) const
{
  if (!m_ready.empty()) {
    loop.wake_at(util::monotonic_now());
  }
}

} // namespace dlock::lock
