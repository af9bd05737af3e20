#pragma once

#include "lock/store.hpp"

#include <deque>
#include <optional>

namespace dlock::lock {

// The answers a store has ready, oldest first: what every store keeps between its operations'
// replies and next_outcome(), written once. A store holds one as a member.
class OutcomeQueue {
public:
  // Queues an answer.
  void answer(Outcome outcome) { m_ready.push_back(std::move(outcome)); }
  // Queues op's answer that says no more than done, or failed with error.
  void answer(Outcome::Op op, std::optional<Error> error = std::nullopt)
  {
    answer(Outcome::of(op, std::move(error)));
  }
  // The oldest answer, taken off the queue; nullopt when none is ready.
  std::optional<Outcome> next();
  // Whether no answer is ready.
  bool empty() const noexcept { return m_ready.empty(); }
  // Forgets every answer (Store::abandon: no outcome comes for what was in flight).
  void clear() noexcept { m_ready.clear(); }
  // Has loop return at once while an answer is ready, so that its taker runs.
  void watch(util::EventLoop& loop) const;

private:
  std::deque<Outcome> m_ready;
};

} // namespace dlock::lock
