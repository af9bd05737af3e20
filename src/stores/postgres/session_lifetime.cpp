#include "stores/postgres/session_lifetime.hpp"

#include "util/error.hpp"

namespace dlock::postgres {

std::optional<SessionLimit> session_limit(const SessionSettings& settings)
{
  std::optional<SessionLimit> soonest;
  auto consider = [&](util::Millis after, std::string setting) {
    if (after > util::Millis(0) && (!soonest || after < soonest->after)) {
      soonest = SessionLimit{after, std::move(setting)};
    }
  };
  consider(settings.idle_session_timeout,
           "idle_session_timeout " + util::format_duration(settings.idle_session_timeout));
  if (settings.over_tcp) {
    consider(settings.tcp_user_timeout,
             "tcp_user_timeout " + util::format_duration(settings.tcp_user_timeout));
    std::int64_t idle = settings.keepalives_idle_s > 0 ? settings.keepalives_idle_s : 7200;
    std::int64_t interval = settings.keepalives_interval_s > 0 ? settings.keepalives_interval_s : 75;
    std::int64_t count = settings.keepalives_count > 0 ? settings.keepalives_count : 9;
    consider(util::Millis((idle + interval * count) * 1000),
             fmt::format("tcp_keepalives_idle {} s + tcp_keepalives_interval {} s x "
                         "tcp_keepalives_count {}",
                         idle, interval, count));
  }
  return soonest;
}

void check_ttl(util::Millis ttl, const SessionSettings& settings)
{
  std::optional<SessionLimit> limit = session_limit(settings);
  if (limit && ttl > limit->after) {
    throw Error(ExitCode::usage,
                "--ttl {} is unsafe on this PostgreSQL server: its {} could end dlock's session, "
                "and free the lock, before the lease runs out; use --ttl {} or less (man dlock, "
                "DATABASE STORES)",
                util::format_duration(ttl), limit->setting, util::format_duration(limit->after));
  }
}

} // namespace dlock::postgres
