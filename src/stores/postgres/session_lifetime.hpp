#pragma once

#include "stores/sql/session_store.hpp"
#include "util/duration.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dlock::postgres {

// The server settings after which PostgreSQL may end a session that is idle or whose client
// cannot be reached, each as the server reports it for dlock's own session (0: off, or the
// operating system's default for the keepalive ones). Ending the session frees its locks, so
// a lease (the time dlock lets a command run on one confirmation) must not be longer.
struct SessionSettings {
  util::Millis idle_session_timeout{0};
  util::Millis tcp_user_timeout{0};
  std::int64_t keepalives_idle_s = 0;
  std::int64_t keepalives_interval_s = 0;
  std::int64_t keepalives_count = 0;
  bool over_tcp = true; // keepalives and the user timeout apply to TCP connections only

  // Takes one row of pg_settings (setting: in ms or s, as the server reports it); the names
  // dlock does not read are ignored.
  void take(std::string_view name, std::int64_t setting);
  // The same from the setting as current_setting() shows it ("0", "90s", "7200": a unit
  // when the server adds one); Error(internal) when it is not a whole number of a time unit.
  void take_shown(std::string_view name, std::string_view shown);
};

// A setting as current_setting() shows it, in ms, or in s when seconds (the unit pg_settings
// reports it in); no unit: already that one. Error(internal) if it is not one.
std::int64_t shown_setting(std::string_view shown, bool seconds);

// The soonest the server could end an unreachable or idle session, and the setting that says
// so ("idle_session_timeout 1m"); nullopt if nothing ends it. With keepalives, 0 is Linux's
// default (idle 7200 s, interval 75 s, 9 probes), which the server's kernel is assumed to keep.
using sql::SessionLimit;
std::optional<SessionLimit> session_limit(const SessionSettings& settings);

// Refuses (Error(usage), one line) a TTL longer than the limit, naming the setting.
void check_ttl(util::Millis ttl, const SessionSettings& settings);

} // namespace dlock::postgres
