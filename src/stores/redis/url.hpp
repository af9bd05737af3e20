#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// Parses redis://[[user][:pass]@]host[:port][/db], rediss://...,
// unix://[[user][:pass]@]/path[?db=N]; throws Error(usage) with the redacted URL on anything
// malformed.
Endpoint parse_url(std::string_view url);

// Where the Sentinels of one monitored master are, as parsed from
// redis-sentinel://[[user][:pass]@]host[:port][,host[:port]…][/db]#MASTER or rediss-sentinel://.
struct SentinelUrl {
  std::vector<Endpoint> sentinels; // default port 26379; TLS as the scheme says; no credentials
  std::string master;              // the name the Sentinels monitor it under
  // The data nodes' settings (user, password, db, TLS); host and port come from the Sentinels.
  Endpoint data;

  // The URL with any password replaced by "***", safe for messages.
  std::string redacted() const;
};

// Whether url is a redis-sentinel:// or rediss-sentinel:// URL.
bool is_sentinel_url(std::string_view url);

// Parses a Sentinel URL; throws Error(usage) with the redacted URL on anything malformed.
SentinelUrl parse_sentinel_url(std::string_view url);

} // namespace dlock::redis
