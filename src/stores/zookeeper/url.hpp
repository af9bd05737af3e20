#pragma once

#include <optional>
#include <string>

namespace dlock::zookeeper {

// Whether a URL names a ZooKeeper ensemble (zk://).
bool is_zookeeper_url(const std::string& url);

// A zk:// URL taken apart: zk://[user:password@]host[:port][,host[:port]…][/chroot].
struct ZkUrl {
  std::string hosts;  // "h1:2181,h2:2181", as the C client takes it (port 2181 when none)
  std::string chroot; // "" for the root, else "/a/b" (no trailing '/'): dlock's nodes live under it
  std::string user;   // digest authentication (zoo_add_auth "digest", "user:password")
  std::optional<std::string> password;
  std::string shown; // the URL without its password, for messages
};

// Parses and checks url (Error(usage) naming what is wrong), without connecting.
ZkUrl parse_url(const std::string& url);

} // namespace dlock::zookeeper
