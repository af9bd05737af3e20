#include "stores/redis/url.hpp"

#include "util/url.hpp"

#include "util/error.hpp"

#include <charconv>

namespace dlock::redis {

namespace {

using util::percent_decode;

std::optional<int> parse_int(std::string_view text, int min, int max)
{
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value < min || value > max) {
    return std::nullopt;
  }
  return value;
}

} // namespace

std::string Endpoint::redacted() const
{
  std::string auth;
  if (!user.empty() || password) {
    auth = user + (password ? ":***" : "") + "@";
  }
  if (transport == Transport::unix_socket) {
    return db != 0 ? fmt::format("unix://{}{}?db={}", auth, socket_path, db)
                   : fmt::format("unix://{}{}", auth, socket_path);
  }
  std::string host_part = host.find(':') != std::string::npos ? fmt::format("[{}]", host) : host;
  std::string url = fmt::format("{}://{}{}:{}", tls ? "rediss" : "redis", auth, host_part, port);
  return db != 0 ? fmt::format("{}/{}", url, db) : url;
}

Endpoint parse_url(std::string_view url)
{
  auto bad = [&](std::string_view why) {
    return Error(ExitCode::usage, "invalid Redis URL '{}': {}", util::url_redacted(url), why);
  };
  Endpoint endpoint;
  std::size_t start = util::after_scheme(url);
  if (start == std::string_view::npos) {
    throw bad("expected redis://, rediss://, unix:// or redis-sentinel://");
  }
  std::string_view scheme = url.substr(0, start - 3);
  if (scheme == "redis") {
    endpoint.transport = Endpoint::Transport::tcp;
  } else if (scheme == "rediss") {
    endpoint.transport = Endpoint::Transport::tcp;
    endpoint.tls = true;
  } else if (scheme == "unix") {
    endpoint.transport = Endpoint::Transport::unix_socket;
  } else {
    throw bad("unknown scheme; expected redis://, rediss://, unix:// or redis-sentinel://");
  }
  std::string_view rest = url.substr(start);

  if (auto userinfo = util::userinfo_of(url)) {
    rest = url.substr(start + userinfo->size() + 1);
    auto user = percent_decode(userinfo->substr(0, userinfo->find(':')));
    if (!user) {
      throw bad("bad %-escape in user name");
    }
    endpoint.user = *user;
    if (auto span = util::password_span(url)) {
      auto password = percent_decode(url.substr(span->offset, span->length));
      if (!password) {
        throw bad("bad %-escape in password");
      }
      endpoint.password = std::move(*password);
    }
  }

  if (endpoint.transport == Endpoint::Transport::unix_socket) {
    std::string_view query;
    if (std::size_t q = rest.find('?'); q != std::string_view::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
    if (rest.empty() || rest.front() != '/') {
      throw bad("a unix socket URL needs an absolute path, as in unix:///run/redis.sock");
    }
    endpoint.socket_path = std::string(rest);
    if (!query.empty()) {
      if (query.substr(0, 3) != "db=") {
        throw bad("the only query parameter is db=N");
      }
      auto db = parse_int(query.substr(3), 0, 1'000'000);
      if (!db) {
        throw bad("db must be a non-negative number");
      }
      endpoint.db = *db;
    }
    return endpoint;
  }

  std::string_view path;
  if (std::size_t slash = rest.find('/'); slash != std::string_view::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    std::size_t close = rest.find(']');
    if (close == std::string_view::npos) {
      throw bad("unterminated [IPv6] address");
    }
    endpoint.host = std::string(rest.substr(1, close - 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        throw bad("unexpected text after ]");
      }
      port_text = after.substr(1);
      if (port_text.empty()) {
        throw bad("empty port");
      }
    }
  } else {
    std::size_t colon = rest.find(':');
    endpoint.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = rest.substr(colon + 1);
      if (port_text.empty()) {
        throw bad("empty port");
      }
    }
  }
  if (endpoint.host.empty()) {
    throw bad("missing host");
  }
  if (!port_text.empty()) {
    auto port = parse_int(port_text, 1, 65535);
    if (!port) {
      throw bad("port must be a number from 1 to 65535");
    }
    endpoint.port = *port;
  }
  if (!path.empty()) {
    auto db = parse_int(path, 0, 1'000'000);
    if (!db) {
      throw bad("the path must be a database number, as in redis://host:6379/2");
    }
    endpoint.db = *db;
  }
  return endpoint;
}

bool is_sentinel_url(std::string_view url)
{
  return url.rfind("redis-sentinel://", 0) == 0 || url.rfind("rediss-sentinel://", 0) == 0;
}

std::string SentinelUrl::redacted() const
{
  std::string auth;
  if (!data.user.empty() || data.password) {
    auth = data.user + (data.password ? ":***" : "") + "@";
  }
  std::string hosts;
  for (const Endpoint& sentinel : sentinels) {
    std::string host = sentinel.host.find(':') != std::string::npos
                         ? fmt::format("[{}]", sentinel.host)
                         : sentinel.host;
    hosts += fmt::format("{}{}:{}", hosts.empty() ? "" : ",", host, sentinel.port);
  }
  std::string db = data.db != 0 ? fmt::format("/{}", data.db) : std::string();
  return fmt::format("{}://{}{}{}#{}", data.tls ? "rediss-sentinel" : "redis-sentinel", auth, hosts,
                     db, master);
}

SentinelUrl parse_sentinel_url(std::string_view url)
{
  auto bad = [&](std::string_view why) {
    return Error(ExitCode::usage, "invalid Sentinel URL '{}': {}", util::url_redacted(url), why);
  };
  if (!is_sentinel_url(url)) {
    throw bad("expected redis-sentinel:// or rediss-sentinel://");
  }
  SentinelUrl parsed;
  bool tls = url.rfind("rediss-", 0) == 0;
  std::size_t hash = url.find('#');
  if (hash == std::string_view::npos || hash + 1 == url.size()) {
    throw bad("the master's name is missing: end the URL with #NAME, the name the Sentinels "
              "monitor it under");
  }
  parsed.master = std::string(url.substr(hash + 1));
  std::string_view body = url.substr(0, hash);
  std::size_t start = util::after_scheme(body);
  std::string_view userinfo;
  if (auto info = util::userinfo_of(body)) {
    userinfo = *info;
    start += info->size() + 1;
  }
  std::string_view hosts = body.substr(start);
  std::string_view path;
  if (std::size_t slash = hosts.find('/'); slash != std::string_view::npos) {
    path = hosts.substr(slash);
    hosts = hosts.substr(0, slash);
  }
  // The data nodes' settings, parsed as the single-node URL they would be.
  std::string scheme = tls ? "rediss://" : "redis://";
  std::string auth = userinfo.empty() ? std::string() : std::string(userinfo) + "@";
  try {
    parsed.data = parse_url(scheme + auth + "127.0.0.1" + std::string(path));
  } catch (const Error&) {
    throw bad("the path must be a database number, as in redis-sentinel://host:26379/2#NAME; "
              "a password's '@', ':' or '/' must be %-escaped");
  }
  if (hosts.empty()) {
    throw bad("no Sentinel address");
  }
  std::size_t from = 0;
  while (from <= hosts.size()) {
    std::size_t comma = hosts.find(',', from);
    std::string_view host =
      hosts.substr(from, comma == std::string_view::npos ? comma : comma - from);
    from = comma == std::string_view::npos ? hosts.size() + 1 : comma + 1;
    if (host.empty()) {
      throw bad("empty Sentinel address in the list");
    }
    bool has_port = host.front() == '[' ? host.find("]:") != std::string_view::npos
                                        : host.find(':') != std::string_view::npos;
    Endpoint sentinel;
    try {
      sentinel = parse_url(scheme + std::string(host) + (has_port ? "" : ":26379"));
    } catch (const Error&) {
      throw bad(fmt::format("bad Sentinel address '{}'", host));
    }
    parsed.sentinels.push_back(std::move(sentinel));
  }
  return parsed;
}

} // namespace dlock::redis
