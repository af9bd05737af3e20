#include "stores/zookeeper/url.hpp"

#include "util/error.hpp"
#include "util/url.hpp"

#include <charconv>

namespace dlock::zookeeper {

namespace {

constexpr std::string_view scheme = "zk://";

// "host[:port]" with a port from 1 to 65535 (2181 when none); IPv6 hosts in brackets.
std::string check_host(std::string_view one)
{
  std::string_view host = one;
  std::string_view port;
  std::size_t close = one.rfind(']');
  std::size_t colon = one.rfind(':');
  if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
    host = one.substr(0, colon);
    port = one.substr(colon + 1);
  }
  if (host.empty() || host == "[]") {
    throw Error(ExitCode::usage,
                "bad ZooKeeper URL: a host is empty (zk://host:port[,host:port…][/chroot])");
  }
  bool bracketed = host.front() == '[';
  if (bracketed ? host.back() != ']' || host.find_first_of("[]", 1) != host.size() - 1
                : host.find_first_of("[]") != std::string_view::npos) {
    throw Error(ExitCode::usage,
                "bad ZooKeeper URL: host '{}' has an unclosed or stray bracket "
                "(an IPv6 address goes in brackets: [::1]:2181)",
                util::url_redacted(one));
  }
  for (char c : host) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '@' || c == '/' || c == '?' || c == '#') {
      throw Error(ExitCode::usage, "bad ZooKeeper URL: host '{}' has a character hosts cannot have",
                  util::url_redacted(host));
    }
  }
  if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
    int number = 0;
    auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (port.empty() || error != std::errc{} || end != port.data() + port.size() || number < 1
        || number > 65535) {
      throw Error(ExitCode::usage, "bad ZooKeeper URL: port '{}' is not a number from 1 to 65535",
                  std::string(port));
    }
    return std::string(host) + ":" + std::to_string(number);
  }
  return std::string(host) + ":2181";
}

// "/a/b" (or "" for the root): no empty, "." or ".." component, no control character.
std::string check_chroot(std::string_view path)
{
  while (path.size() > 1 && path.back() == '/') {
    path.remove_suffix(1);
  }
  if (path.empty() || path == "/") {
    return "";
  }
  std::optional<std::string> decoded = util::percent_decode(path);
  if (!decoded) {
    throw Error(ExitCode::usage, "bad ZooKeeper URL: malformed %-escape in the chroot");
  }
  std::string_view rest = *decoded;
  rest.remove_prefix(1);
  while (true) {
    std::string_view part = rest.substr(0, rest.find('/'));
    if (part.empty() || part == "." || part == "..") {
      throw Error(ExitCode::usage,
                  "bad ZooKeeper URL: chroot '{}' has an empty, '.' or '..' component", *decoded);
    }
    for (char c : part) {
      if (static_cast<unsigned char>(c) < ' ' || c == 0x7f) {
        throw Error(ExitCode::usage, "bad ZooKeeper URL: the chroot has a control character");
      }
    }
    if (part.size() == rest.size()) {
      break;
    }
    rest.remove_prefix(part.size() + 1);
  }
  return *decoded;
}

} // namespace

bool is_zookeeper_url(const std::string& url) { return url.starts_with(scheme); }

ZkUrl parse_url(const std::string& url)
{
  if (!is_zookeeper_url(url)) {
    throw Error(ExitCode::usage, "bad ZooKeeper URL: it must start with zk://");
  }
  ZkUrl parsed;
  std::string_view rest = std::string_view(url).substr(scheme.size());
  if (rest.find_first_of("?#") != std::string_view::npos) {
    throw Error(ExitCode::usage, "bad ZooKeeper URL {}: it takes no query or fragment",
                util::url_redacted(url));
  }
  std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  std::size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view info = authority.substr(0, at);
    authority.remove_prefix(at + 1);
    std::size_t colon = info.find(':');
    std::optional<std::string> user = util::percent_decode(info.substr(0, colon));
    if (!user || user->empty()) {
      throw Error(ExitCode::usage,
                  "bad ZooKeeper URL {}: digest authentication needs "
                  "user:password@ (a user name)",
                  util::url_redacted(url));
    }
    parsed.user = *user;
    if (colon != std::string_view::npos && colon + 1 < info.size()) {
      parsed.password = util::percent_decode(info.substr(colon + 1));
      if (!parsed.password) {
        throw Error(ExitCode::usage, "bad ZooKeeper URL: malformed %-escape in the password");
      }
    }
  }
  if (authority.empty()) {
    throw Error(ExitCode::usage,
                "bad ZooKeeper URL {}: no host (zk://host:port[,host:port…][/chroot])",
                util::url_redacted(url));
  }
  for (std::string_view hosts = authority;;) {
    std::string_view one = hosts.substr(0, hosts.find(','));
    parsed.hosts += (parsed.hosts.empty() ? "" : ",") + check_host(one);
    if (one.size() == hosts.size()) {
      break;
    }
    hosts.remove_prefix(one.size() + 1);
  }
  parsed.chroot = check_chroot(path);
  parsed.shown = "zk://" + (parsed.user.empty() ? "" : parsed.user + "@") + parsed.hosts
                 + (parsed.chroot.empty() ? "" : parsed.chroot);
  return parsed;
}

} // namespace dlock::zookeeper
