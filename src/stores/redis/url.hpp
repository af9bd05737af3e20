#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dlock::redis {

// Where and how to reach one Redis server, as parsed from a redis://, rediss:// or unix:// URL.
struct Endpoint {
  enum class Transport { tcp, unix_socket };

  Transport transport = Transport::tcp;
  bool tls = false;
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string socket_path;
  std::string user;                    // ACL user; empty means "default"
  std::optional<std::string> password; // from the URL; --password-file and DLOCK_PASSWORD win
  int db = 0;

  // The URL with any password replaced by "***", safe for messages.
  std::string redacted() const;
};

// Parses redis://[[user][:pass]@]host[:port][/db], rediss://..., unix://[[user][:pass]@]/path[?db=N];
// throws Error(usage) with the redacted URL on anything malformed.
Endpoint parse_url(std::string_view url);

} // namespace dlock::redis
