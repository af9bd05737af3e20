#pragma once

#include "lock/status.hpp"
#include "stores/redis/connection.hpp"
#include "stores/redis/keys.hpp"

#include <string>
#include <vector>

namespace dlock::redis {

using lock::LockStatus;

// Reads one lock's status; throws Redirected if a cluster node sends it elsewhere.
LockStatus read_status(Connection& connection, std::string_view prefix, const std::string& name,
                       util::TimePoint deadline);

// Every lock name under prefix whose name matches the glob, found with SCAN (never KEYS); each
// SCAN gets request_timeout, however many there are.
std::vector<std::string> scan_lock_names(Connection& connection, std::string_view prefix,
                                         std::string_view pattern, util::Millis request_timeout);

// Statuses of many locks, pipelined; locks freed meanwhile are left out. Each reply gets
// request_timeout, however many locks there are.
std::vector<LockStatus> read_statuses(Connection& connection, std::string_view prefix,
                                      const std::vector<std::string>& names,
                                      util::Millis request_timeout);

} // namespace dlock::redis
