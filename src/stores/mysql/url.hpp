#pragma once

#include "stores/config.hpp"

#include <optional>
#include <string>

namespace dlock::mysql {

// Whether a URL names a MySQL or MariaDB server (mysql://, mariadb://).
bool is_mysql_url(const std::string& url);

// How to reach the server, for mysql_real_connect.
struct ConnectParams {
  std::string host;   // "localhost" (with no port): the unix socket; a port means TCP
  unsigned port = 0;  // 0: the library's default (3306)
  std::string socket; // ?socket=/path: this unix socket
  std::string user;   // empty: the library's default (the login name)
  std::optional<std::string> password;
  std::string database;
  unsigned connect_timeout_s = 2;
  // --tls-ca: TLS required, the server's certificate checked against it and the host name;
  // --tls-cert, --tls-key: a client certificate (TLS required too). All empty: no TLS.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string shown; // the URL without its password, for messages
};

// mysql://[user[:password]@]host[:port]/database[?socket=/path] (mariadb:// the same; an
// IPv6 host in brackets; %XX escapes in the user, password, database and socket). Checks it
// without connecting (Error(usage) saying what is wrong); --password-file (config.password)
// wins over a password in the URL.
ConnectParams connect_params(const std::string& url, const stores::StoreConfig& config);

} // namespace dlock::mysql
