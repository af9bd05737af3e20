#pragma once

#include <cstdint>
#include <string>

namespace dlock::lock {

// Who holds a lock: stored beside the lock for status, list and conflict messages.
struct HolderInfo {
  std::string host;
  std::int64_t pid = 0;
  std::string user;
  std::string command;          // truncated command line
  std::int64_t acquired_ms = 0; // Unix time in ms, from the store's clock
  std::int64_t fence = 0;       // fencing token handed to this holder
  std::int64_t ttl_ms = 0;      // lease length the holder asked for

  // This process: host name, pid, user name and the given command line (truncated).
  static HolderInfo current(const std::string& command_line);
  // "user@host pid 123 (cmd)" for one-line messages.
  std::string describe() const;
  // Whether other names the same holder process (a store of several nodes records one holder
  // on each, with its own fencing token and times).
  bool same_holder(const HolderInfo& other) const
  {
    return host == other.host && pid == other.pid && user == other.user && command == other.command;
  }
};

// Longest command line kept in the metadata, in bytes.
inline constexpr std::size_t max_command_length = 256;

} // namespace dlock::lock
