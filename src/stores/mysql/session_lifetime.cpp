#include "stores/mysql/session_lifetime.hpp"

namespace dlock::mysql {

void SessionSettings::take(std::string_view variable, std::int64_t value)
{
  if (variable == "wait_timeout") {
    wait_timeout = util::Millis(value * 1000);
  } else if (variable == "tcp_keepalive_time") {
    keepalive_time_s = value;
  } else if (variable == "tcp_keepalive_interval") {
    keepalive_interval_s = value;
  } else if (variable == "tcp_keepalive_probes") {
    keepalive_probes = value;
  }
}

std::optional<SessionLimit> session_limit(const SessionSettings& settings)
{
  sql::SoonestLimit limit;
  limit.consider(settings.wait_timeout,
                 "wait_timeout " + util::format_duration(settings.wait_timeout));
  if (settings.over_tcp) {
    limit.consider_keepalives(settings.keepalive_time_s, settings.keepalive_interval_s,
                              settings.keepalive_probes, "tcp_keepalive_time",
                              "tcp_keepalive_interval", "tcp_keepalive_probes");
  }
  return limit.soonest();
}

void check_ttl(util::Millis ttl, const SessionSettings& settings)
{
  sql::check_ttl(ttl, session_limit(settings), "MySQL");
}

} // namespace dlock::mysql
