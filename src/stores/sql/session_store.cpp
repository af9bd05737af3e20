#include "stores/sql/session_store.hpp"

#include "lock/features.hpp"
#include "util/duration.hpp"

#include <fmt/format.h>

namespace dlock::sql {

using lock::Outcome;
using Op = lock::Outcome::Op;

SessionStore::SessionStore(std::string idle_timeout_setting)
  : m_idle_timeout_setting(std::move(idle_timeout_setting))
{
}

void SessionStore::start_withdraw(const lock::LockName&, const lock::WaitTicket&)
{
  answer(Op::withdraw);
}

std::optional<Outcome> SessionStore::next_outcome() { return m_answers.next(); }

lock::StoreTraits SessionStore::session_traits(std::string name, lock::FeatureSet features) const
{
  return lock::StoreTraits{
    .name = std::move(name),
    .features = features,
    .left_behind = fmt::format("the server frees it when it ends dlock's session: at once if the "
                               "connection closed cleanly, else when its TCP keepalive or {} "
                               "gives up on it",
                               m_idle_timeout_setting),
    .loss_cause = "its database session ended (terminated, timed out or cut off) or it was "
                  "released by someone else",
  };
}

void SoonestLimit::consider(util::Millis after, std::string setting)
{
  if (after > util::Millis(0) && (!m_soonest || after < m_soonest->after)) {
    m_soonest = SessionLimit{after, std::move(setting)};
  }
}

void SoonestLimit::consider_keepalives(std::int64_t idle_s, std::int64_t interval_s,
                                       std::int64_t count, const char* idle_name,
                                       const char* interval_name, const char* count_name)
{
  idle_s = idle_s > 0 ? idle_s : 7200;
  interval_s = interval_s > 0 ? interval_s : 75;
  count = count > 0 ? count : 9;
  consider(util::Millis((idle_s + interval_s * count) * 1000),
           fmt::format("{} {} s + {} {} s x {} {}", idle_name, idle_s, interval_name, interval_s,
                       count_name, count));
}

void check_ttl(util::Millis ttl, const std::optional<SessionLimit>& limit, std::string_view server)
{
  if (limit && ttl > limit->after) {
    throw Error(ExitCode::usage,
                "--ttl {} is unsafe on this {} server: its {} could end dlock's session, and "
                "free the lock, before the lease runs out; use --ttl {} or less (man dlock, "
                "DATABASE STORES)",
                util::format_duration(ttl), server, limit->setting,
                util::format_duration(limit->after));
  }
}

} // namespace dlock::sql
