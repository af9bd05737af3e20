#include "stores/mysql/url.hpp"

#include "util/error.hpp"
#include "util/url.hpp"

#include <algorithm>
#include <charconv>

namespace dlock::mysql {

namespace {

[[noreturn]] void bad(const std::string& url, const std::string& why)
{
  throw Error(ExitCode::usage, "bad MySQL URL {}: {}", util::url_redacted(url), why);
}

std::string decoded(const std::string& url, std::string_view part, const char* what)
{
  std::optional<std::string> text = util::percent_decode(part);
  if (!text) {
    bad(url, fmt::format("a malformed %XX escape in the {}", what));
  }
  return *text;
}

} // namespace

bool is_mysql_url(const std::string& url)
{
  return url.starts_with("mysql://") || url.starts_with("mariadb://");
}

ConnectParams connect_params(const std::string& url, const stores::StoreConfig& config)
{
  std::size_t start = util::after_scheme(url);
  if (!is_mysql_url(url) || start == std::string::npos) {
    bad(url, "it must start with mysql:// or mariadb://");
  }
  ConnectParams params;
  std::string_view rest = std::string_view(url).substr(start);
  if (rest.find('#') != std::string_view::npos) {
    bad(url, "a '#' must be escaped as %23");
  }
  std::string_view query;
  if (std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::optional<std::string_view> userinfo =
    util::userinfo_of(std::string_view(url).substr(0, start + rest.size()));
  if (userinfo) {
    rest.remove_prefix(userinfo->size() + 1);
    std::string_view user = *userinfo;
    if (std::size_t colon = user.find(':'); colon != std::string_view::npos) {
      std::string password = decoded(url, user.substr(colon + 1), "password");
      if (!password.empty()) {
        params.password = password;
      }
      user = user.substr(0, colon);
    }
    params.user = decoded(url, user, "user name");
  }
  std::size_t slash = rest.find('/');
  if (slash == std::string_view::npos) {
    bad(url, "it names no database (mysql://host/DATABASE)");
  }
  std::string_view hostport = rest.substr(0, slash);
  params.database = decoded(url, rest.substr(slash + 1), "database name");
  if (params.database.empty() || params.database.find('/') != std::string::npos) {
    bad(url, "it names no database, or more than one (mysql://host/DATABASE)");
  }
  std::string_view port;
  if (hostport.starts_with("[")) {
    std::size_t close = hostport.find(']');
    if (close == std::string_view::npos) {
      bad(url, "an IPv6 address lacks its ']'");
    }
    params.host = std::string(hostport.substr(1, close - 1));
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty() && !after.starts_with(":")) {
      bad(url, "only ':PORT' may follow an IPv6 address");
    }
    port = after.empty() ? after : after.substr(1);
  } else {
    std::size_t colon = hostport.find(':');
    params.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = hostport.substr(colon + 1);
    }
  }
  if (!port.empty() || hostport.ends_with(":")) {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      bad(url, fmt::format("bad port '{}'", port));
    }
    params.port = value;
  }
  while (!query.empty()) {
    std::size_t amp = std::min(query.find('&'), query.size());
    std::string_view pair = query.substr(0, amp);
    query.remove_prefix(std::min(amp + 1, query.size()));
    std::size_t eq = pair.find('=');
    std::string_view key = pair.substr(0, eq);
    std::string value =
      eq == std::string_view::npos ? "" : decoded(url, pair.substr(eq + 1), "query");
    if (key == "socket" && !value.empty()) {
      params.socket = value;
    } else {
      bad(url, fmt::format("unknown parameter '{}' (dlock knows ?socket=/path)", key));
    }
  }
  if (params.host.empty()) {
    if (params.socket.empty()) {
      bad(url, "it names no host (mysql://HOST/db, or mysql://localhost/db?socket=/path)");
    }
    params.host = "localhost";
  }
  if (!params.socket.empty() && params.host != "localhost") {
    bad(url, "?socket= goes with the host localhost");
  }
  if (config.password) {
    params.password = config.password;
  }
  params.tls_ca = config.tls.ca_file;
  params.tls_cert = config.tls.cert_file;
  params.tls_key = config.tls.key_file;
  if (!config.tls.server_name.empty()) {
    throw Error(ExitCode::usage, "--tls-server-name is not available for mysql:// (the server's "
                                 "certificate is checked against the URL's host)");
  }
  params.connect_timeout_s =
    unsigned(std::max<std::int64_t>(1, (config.request_timeout.count() + 999) / 1000));
  params.shown =
    std::string(url.substr(0, start)) + (params.user.empty() ? "" : params.user + "@")
    + (params.host.find(':') != std::string::npos ? "[" + params.host + "]" : params.host)
    + (params.port != 0 ? ":" + std::to_string(params.port) : "") + "/" + params.database
    + (params.socket.empty() ? "" : "?socket=" + params.socket);
  return params;
}

} // namespace dlock::mysql
