#pragma once

#include "lock/holder.hpp"
#include "lock/keys.hpp"
#include "redis/connection.hpp"

#include <string>
#include <vector>

namespace dlock::lock {

// What `status` and `list` show about one lock, read atomically by one script.
struct LockStatus {
  std::string name;
  bool held = false;
  HolderInfo holder;
  std::int64_t ttl_ms = 0;         // remaining lease
  std::int64_t last_fence = 0;     // the fencing counter (last token handed out)
  std::int64_t waiters = 0;        // live waiters, fair and unfair
  std::int64_t server_time_ms = 0; // Redis's clock, so "held for" needs no client clock

  // How long the current holder has held it, by the server's clock.
  std::int64_t held_ms() const;
  // One JSON object with the documented field names.
  std::string to_json() const;
};

// Reads one lock's status.
LockStatus read_status(redis::Connection& connection, std::string_view prefix,
                       const std::string& name, util::TimePoint deadline);

// Every lock name under prefix whose name matches the glob, found with SCAN (never KEYS); each
// SCAN gets request_timeout, however many there are.
std::vector<std::string> scan_lock_names(redis::Connection& connection, std::string_view prefix,
                                         std::string_view pattern, util::Millis request_timeout);

// Statuses of many locks, pipelined; locks freed meanwhile are left out. Each reply gets
// request_timeout, however many locks there are.
std::vector<LockStatus> read_statuses(redis::Connection& connection, std::string_view prefix,
                                      const std::vector<std::string>& names,
                                      util::Millis request_timeout);

} // namespace dlock::lock
