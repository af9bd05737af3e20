#pragma once

#include "stores/sql/session_store.hpp"
#include "util/duration.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dlock::mysql {

// The server settings after which MySQL or MariaDB may end a session that is idle or whose
// client cannot be reached, as the server reports them for dlock's own session (after dlock
// raised its wait_timeout). Ending the session frees its locks, so a lease (the time dlock
// lets a command run on one confirmation) must not be longer.
struct SessionSettings {
  util::Millis wait_timeout{0};      // an idle session ends after it (0: unknown)
  std::int64_t keepalive_time_s = 0; // MariaDB's tcp_keepalive_*; 0: the system's default
  std::int64_t keepalive_interval_s = 0;
  std::int64_t keepalive_probes = 0;
  bool over_tcp = true; // keepalives apply to TCP connections only

  // Takes one row of SHOW VARIABLES (value: in s); the variables dlock does not read are
  // ignored.
  void take(std::string_view variable, std::int64_t value);
};

// The wait_timeout dlock asks for its sessions: the largest the server allows on Linux (365
// days); the server keeps what it allows.
inline constexpr std::int64_t wanted_wait_timeout_s = 31'536'000;

// The soonest the server could end an idle or unreachable session, and the setting that says
// so; nullopt if nothing ends it. Keepalives at 0 are Linux's defaults (7200 s, 75 s, 9).
using sql::SessionLimit;
std::optional<SessionLimit> session_limit(const SessionSettings& settings);

// Refuses (Error(usage), one line) a TTL longer than the limit, naming the setting.
void check_ttl(util::Millis ttl, const SessionSettings& settings);

} // namespace dlock::mysql
