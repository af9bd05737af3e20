#pragma once

#include "redis/connection.hpp"

#include <string>
#include <vector>

namespace dlock::redis {

// A Lua script run with EVALSHA, falling back to EVAL when the server's script cache is empty
// (after a restart, a failover or SCRIPT FLUSH).
class Script {
public:
  explicit Script(std::string source);

  // EVALSHA sha numkeys keys... args...
  std::vector<std::string> evalsha(const std::vector<std::string>& keys,
                                   const std::vector<std::string>& args) const;
  // EVAL source numkeys keys... args...
  std::vector<std::string> eval(const std::vector<std::string>& keys,
                                const std::vector<std::string>& args) const;
  // Runs the script blocking, retrying once with EVAL on NOSCRIPT; error replies are returned.
  Reply run(Connection& connection, const std::vector<std::string>& keys,
            const std::vector<std::string>& args, util::TimePoint deadline) const;

private:
  std::string m_source;
  std::string m_sha;
};

// Whether a reply is NOSCRIPT, meaning "send the script body with EVAL".
bool is_noscript(const redisReply& reply);

} // namespace dlock::redis
