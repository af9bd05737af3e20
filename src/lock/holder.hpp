#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlock::lock {

// Who holds a lock: stored beside the lock for status, list and conflict messages.
struct HolderInfo {
  std::string host;
  std::int64_t pid = 0;
  std::string user;
  std::string command;          // the program's name, or its truncated command line (recorded_command)
  std::int64_t acquired_ms = 0; // Unix time in ms, from the store's clock
  std::int64_t fence = 0;       // fencing token handed to this holder
  std::int64_t ttl_ms = 0;      // lease length the holder asked for

  // This process: host name, pid, user name and the given command (truncated).
  static HolderInfo current(const std::string& command);
  // "user@host pid 123 (cmd)" for one-line messages.
  std::string describe() const;
  // "user@host pid 123": who, without the command, for logs that others read (syslog).
  std::string identity() const;
  // Whether other names the same holder process (a store of several nodes records one holder
  // on each, with its own fencing token and times).
  bool same_holder(const HolderInfo& other) const
  {
    return host == other.host && pid == other.pid && user == other.user && command == other.command;
  }
};

// Longest command line kept in the metadata, in bytes.
inline constexpr std::size_t max_command_length = 256;

// What a holder records of its command, which every reader of the store sees: the program's
// name (the last part of argv[0]: "sh" for -c 'STRING'), since arguments may carry secrets;
// the whole command line, truncated, only with whole_line (--record-command).
std::string recorded_command(const std::vector<std::string>& argv, bool whole_line);

} // namespace dlock::lock
