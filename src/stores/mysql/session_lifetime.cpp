#include "stores/mysql/session_lifetime.hpp"

#include "util/error.hpp"

namespace dlock::mysql {

std::optional<SessionLimit> session_limit(const SessionSettings& settings)
{
  std::optional<SessionLimit> soonest;
  auto consider = [&](util::Millis after, std::string setting) {
    if (after > util::Millis(0) && (!soonest || after < soonest->after)) {
      soonest = SessionLimit{after, std::move(setting)};
    }
  };
  consider(settings.wait_timeout, "wait_timeout " + util::format_duration(settings.wait_timeout));
  if (settings.over_tcp) {
    std::int64_t time = settings.keepalive_time_s > 0 ? settings.keepalive_time_s : 7200;
    std::int64_t interval = settings.keepalive_interval_s > 0 ? settings.keepalive_interval_s : 75;
    std::int64_t probes = settings.keepalive_probes > 0 ? settings.keepalive_probes : 9;
    consider(util::Millis((time + interval * probes) * 1000),
             fmt::format("tcp_keepalive_time {} s + tcp_keepalive_interval {} s x "
                         "tcp_keepalive_probes {}",
                         time, interval, probes));
  }
  return soonest;
}

void check_ttl(util::Millis ttl, const SessionSettings& settings)
{
  std::optional<SessionLimit> limit = session_limit(settings);
  if (limit && ttl > limit->after) {
    throw Error(ExitCode::usage,
                "--ttl {} is unsafe on this MySQL server: its {} could end dlock's session, and "
                "free the lock, before the lease runs out; use --ttl {} or less (man dlock, "
                "DATABASE STORES)",
                util::format_duration(ttl), limit->setting, util::format_duration(limit->after));
  }
}

} // namespace dlock::mysql
