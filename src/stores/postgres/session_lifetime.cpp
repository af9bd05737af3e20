#include "stores/postgres/session_lifetime.hpp"

namespace dlock::postgres {

void SessionSettings::take(std::string_view name, std::int64_t setting)
{
  if (name == "idle_session_timeout") {
    idle_session_timeout = util::Millis(setting);
  } else if (name == "tcp_user_timeout") {
    tcp_user_timeout = util::Millis(setting);
  } else if (name == "tcp_keepalives_idle") {
    keepalives_idle_s = setting;
  } else if (name == "tcp_keepalives_interval") {
    keepalives_interval_s = setting;
  } else if (name == "tcp_keepalives_count") {
    keepalives_count = setting;
  }
}

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
