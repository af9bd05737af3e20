#pragma once

#include "stores/redis/connection.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace dlock::redis {

// A Lua script run with EVALSHA, falling back to EVAL when the server's script cache is empty
// (after a restart, a failover or SCRIPT FLUSH).
class Script {
public:
  // source and its SHA-1 in hex, both computed at build time (see scripts.hpp): string
  // literals, or anything else that outlives the Script.
  constexpr Script(std::string_view source, std::string_view sha) : m_source(source), m_sha(sha) {}

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
  std::string_view m_source;
  std::string_view m_sha;
};

// Whether a reply is NOSCRIPT, meaning "send the script body with EVAL".
bool is_noscript(const redisReply& reply);

} // namespace dlock::redis
