#include "commands/renewal_round.hpp"

#include <algorithm>

namespace dlock::commands {

void RenewalRound::start(lock::Store& store, const std::vector<lock::LockName>& names,
                         const lock::RenewRequest& request)
{
  reset();
  m_owed = names.size();
  for (const lock::LockName& name : names) {
    store.start_renew(name, request);
  }
}

RenewalRound::Verdict RenewalRound::add(const lock::Outcome& outcome)
{
  if (m_owed == 0) {
    return Verdict::pending; // an answer to an abandoned round
  }
  if (outcome.error) {
    if (!m_failed) {
      m_error = outcome.error->what();
    }
    m_failed = true;
  } else if (!outcome.held) {
    m_refused = true;
  } else if (outcome.replicas_acknowledged) {
    m_replicas = std::min(m_replicas.value_or(*outcome.replicas_acknowledged),
                          *outcome.replicas_acknowledged);
  }
  if (--m_owed > 0) {
    return Verdict::pending;
  }
  return m_refused ? Verdict::refused : m_failed ? Verdict::failed : Verdict::confirmed;
}

} // namespace dlock::commands
