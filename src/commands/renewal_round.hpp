#pragma once

#include "lock/store.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace dlock::commands {

// One renewal of a lock made of several keys: a request per key, and one verdict once every
// key has answered, so that whoever keeps the lease (run's Supervisor, acquire --keep's
// holder) treats them as one lease. A key no longer held loses the lock, whatever the others
// said.
class RenewalRound {
public:
  enum class Verdict { pending, confirmed, refused, failed };

  // Sends a renewal of every key to store; the round owes that many answers.
  void start(lock::Store& store, const std::vector<lock::LockName>& names,
             const lock::RenewRequest& request);
  // Forgets the round (its requests were abandoned).
  void reset() noexcept { *this = RenewalRound{}; }
  // Whether answers are still owed.
  bool owed() const noexcept { return m_owed > 0; }
  // One key's answer (an Outcome::Op::renew); the verdict once it was the last one owed.
  Verdict add(const lock::Outcome& outcome);
  // With a confirmed verdict: the fewest replicas that acknowledged one key's renewal.
  std::optional<int> replicas() const noexcept { return m_replicas; }
  // With a failed verdict: the first error seen.
  const std::string& error() const noexcept { return m_error; }

private:
  std::size_t m_owed = 0;
  bool m_refused = false;
  bool m_failed = false;
  std::optional<int> m_replicas;
  std::string m_error;
};

} // namespace dlock::commands
