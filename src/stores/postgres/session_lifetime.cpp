#include "stores/postgres/session_lifetime.hpp"

#include "stores/sql/session.hpp"
#include "util/error.hpp"
#include "util/text.hpp"

#include <cctype>
#include <cstdint>

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

void SessionSettings::take_shown(std::string_view name, std::string_view shown)
{
  bool seconds = name == "tcp_keepalives_idle" || name == "tcp_keepalives_interval";
  take(name, name == "tcp_keepalives_count" ? sql::parse_number(shown, "PostgreSQL")
                                            : shown_setting(shown, seconds));
}

std::int64_t shown_setting(std::string_view shown, bool seconds)
{
  std::size_t digits = 0;
  while (digits < shown.size()
         && (std::isdigit(static_cast<unsigned char>(shown[digits])) != 0
             || (digits == 0 && shown[0] == '-'))) {
    ++digits;
  }
  std::int64_t number = sql::parse_number(shown.substr(0, digits), "PostgreSQL");
  std::string_view unit = shown.substr(digits);
  std::int64_t ms_per_unit = 0;
  if (unit.empty()) {
    return number; // the unit pg_settings reports it in
  } else if (unit == "ms") {
    ms_per_unit = 1;
  } else if (unit == "s") {
    ms_per_unit = 1'000;
  } else if (unit == "min") {
    ms_per_unit = 60'000;
  } else if (unit == "h") {
    ms_per_unit = 3'600'000;
  } else if (unit == "d") {
    ms_per_unit = 86'400'000;
  } else {
    throw Error(ExitCode::internal, "PostgreSQL: a setting of unknown unit: '{}'",
                util::printable(shown));
  }
  if (number > INT64_MAX / 86'400'000 || number < -(INT64_MAX / 86'400'000)) {
    throw Error(ExitCode::internal, "PostgreSQL: a setting out of range: '{}'",
                util::printable(shown));
  }
  std::int64_t ms = number * ms_per_unit;
  return seconds ? ms / 1'000 : ms;
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
