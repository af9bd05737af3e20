#pragma once

#include "util/duration.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dlock::stores {

// --tls-ca, --tls-cert, --tls-key, --tls-server-name (or DLOCK_TLS_*).
struct TlsFiles {
  std::string ca_file;   // empty: the system's trusted CAs
  std::string cert_file; // client certificate, for mutual TLS
  std::string key_file;
  std::string server_name; // empty: the URL's host
};

// Where the locks live and how to reach them, as the user gave it, whatever the store.
struct StoreConfig {
  std::vector<std::string> urls;                // one store per URL; at least one
  std::optional<std::string> password;          // wins over a password in a URL
  std::optional<std::string> sentinel_password; // the Sentinels' own, if they require one
  util::Millis request_timeout{2000};           // each connection attempt and each request
  TlsFiles tls;
  std::string prefix = "dlock:"; // namespace of every key dlock writes
};

} // namespace dlock::stores
