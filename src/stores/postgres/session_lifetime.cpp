#include "stores/postgres/session_lifetime.hpp"

namespace dlock::postgres {

std::optional<SessionLimit> session_limit(const SessionSettings& settings)
{
  sql::SoonestLimit limit;
  limit.consider(settings.idle_session_timeout,
                 "idle_session_timeout " + util::format_duration(settings.idle_session_timeout));
  if (settings.over_tcp) {
    limit.consider(settings.tcp_user_timeout,
                   "tcp_user_timeout " + util::format_duration(settings.tcp_user_timeout));
    limit.consider_keepalives(settings.keepalives_idle_s, settings.keepalives_interval_s,
                              settings.keepalives_count, "tcp_keepalives_idle",
                              "tcp_keepalives_interval", "tcp_keepalives_count");
  }
  return limit.soonest();
}

void check_ttl(util::Millis ttl, const SessionSettings& settings)
{
  sql::check_ttl(ttl, session_limit(settings), "PostgreSQL");
}

} // namespace dlock::postgres
