#include "stores/open.hpp"

#include "stores/etcd/etcd_store.hpp"
#include "stores/etcd/libcurl.hpp"
#include "stores/file/file_store.hpp"
#include "stores/mysql/libmariadb.hpp"
#include "stores/mysql/mysql_store.hpp"
#include "stores/postgres/libpq.hpp"
#include "stores/postgres/postgres_store.hpp"
#include "stores/redis/redis_store.hpp"
#include "stores/redis/redlock_store.hpp"
#include "stores/redis/sentinel.hpp"
#include "stores/redis/tls.hpp"
#include "stores/redis/url.hpp"
#include "stores/zookeeper/libzookeeper.hpp"
#include "stores/zookeeper/zookeeper_store.hpp"

#include <hiredis/hiredis.h>

#include <algorithm>

namespace dlock::stores {

namespace {

// The store of one URL: a Sentinel group's master, or one server (which may be a Cluster node).
std::unique_ptr<redis::RedisStore> open_redis(const std::string& url, const StoreConfig& config)
{
  redis::ConnectOptions options;
  std::unique_ptr<redis::SwitchListener> switches;
  if (redis::is_sentinel_url(url)) {
    auto locator = std::make_shared<redis::SentinelLocator>(
      redis::parse_sentinel_url(url), config.sentinel_password, config.request_timeout, config.tls);
    switches = std::make_unique<redis::SwitchListener>(locator);
    options = redis::sentinel_data_options(std::move(locator), config.password,
                                           config.request_timeout, config.tls);
  } else {
    options.endpoint = redis::parse_url(url);
    options.password = config.password;
    options.connect_timeout = config.request_timeout;
    options.tls = config.tls;
  }
  return std::make_unique<redis::RedisStore>(std::move(options), config.prefix,
                                             std::move(switches));
}

// A store other than Redis that one --url names alone (several --url are Redlock's independent
// Redis masters): how to recognise its URL, what to say when it is one of several, and how to
// open it.
struct SingleUrlStore {
  bool (*matches)(const std::string& url);
  const char* several; // the message's end: how to give several servers of that store
  std::unique_ptr<lock::Store> (*open)(const std::string& url, const StoreConfig& config);
};

const SingleUrlStore single_url_stores[] = {
  {[](const std::string& url) { return postgres::is_postgres_url(url); }, "give it alone",
   [](const std::string& url, const StoreConfig& config) -> std::unique_ptr<lock::Store> {
     return std::make_unique<postgres::PostgresStore>(postgres::connect_params(url, config),
                                                      config.prefix);
   }},
  {[](const std::string& url) { return mysql::is_mysql_url(url); }, "give it alone",
   [](const std::string& url, const StoreConfig& config) -> std::unique_ptr<lock::Store> {
     return std::make_unique<mysql::MysqlStore>(mysql::connect_params(url, config), config.prefix);
   }},
  {[](const std::string& url) { return etcd::is_etcd_url(url); },
   "give one, with the cluster's endpoints separated by commas",
   [](const std::string& url, const StoreConfig& config) { return etcd::open(url, config); }},
  {[](const std::string& url) { return zookeeper::is_zookeeper_url(url); },
   "give the ensemble's servers in one, zk://host:port,host:port/chroot",
   [](const std::string& url, const StoreConfig& config) -> std::unique_ptr<lock::Store> {
     return std::make_unique<zookeeper::ZookeeperStore>(zookeeper::connect_params(url, config),
                                                        config.request_timeout, config.prefix);
   }},
  {[](const std::string& url) { return file::is_file_url(url); }, "give it alone",
   [](const std::string& url, const StoreConfig&) -> std::unique_ptr<lock::Store> {
     return std::make_unique<file::FileStore>(file::directory_of(url));
   }},
};

// The URL's scheme with its article, for messages ("a postgres://", "an etcd://").
std::string scheme_of(const std::string& url)
{
  std::size_t end = url.find("://");
  std::string scheme = end == std::string::npos ? url : url.substr(0, end + 3);
  bool vowel =
    !scheme.empty() && std::string_view("aeiou").find(scheme.front()) != std::string_view::npos;
  return (vowel ? "an " : "a ") + scheme;
}

} // namespace

std::unique_ptr<lock::Store> open_store(const StoreConfig& config)
{
  for (const SingleUrlStore& store : single_url_stores) {
    for (const std::string& url : config.urls) {
      if (!store.matches(url)) {
        continue;
      }
      if (config.urls.size() > 1) {
        throw Error(ExitCode::usage,
                    "{} URL cannot be one of several --url (several URLs are Redlock's "
                    "independent Redis masters): {}",
                    scheme_of(url), store.several);
      }
      return store.open(url, config);
    }
  }
  if (config.urls.size() <= 1) {
    return open_redis(config.urls.empty() ? "redis://127.0.0.1:6379" : config.urls.front(), config);
  }
  // Several URLs: Redlock across independent masters, each a plain server.
  std::vector<std::unique_ptr<redis::Node>> nodes;
  std::vector<std::string> names;
  for (const std::string& url : config.urls) {
    if (redis::is_sentinel_url(url)) {
      throw Error(ExitCode::usage,
                  "a Sentinel URL cannot be one of several --url (Redlock wants independent "
                  "masters): give it alone, or the masters' own URLs");
    }
    redis::Endpoint endpoint = redis::parse_url(url);
    if (std::find(names.begin(), names.end(), endpoint.redacted()) != names.end()) {
      throw Error(ExitCode::usage,
                  "{} is given twice: Redlock (several --url) wants independent masters",
                  endpoint.redacted());
    }
    names.push_back(endpoint.redacted());
    std::unique_ptr<redis::RedisStore> node = open_redis(url, config);
    node->join_redlock();
    nodes.push_back(std::move(node));
  }
  return std::make_unique<redis::RedlockStore>(std::move(nodes), std::move(names));
}

std::string library_versions()
{
  return fmt::format("hiredis {}.{}.{}; TLS: {}; {}; {}; {}; {}", HIREDIS_MAJOR, HIREDIS_MINOR,
                     HIREDIS_PATCH, redis::tls_description(), postgres::libpq_version(),
                     mysql::libmariadb_version(), etcd::libcurl_version(),
                     zookeeper::libzookeeper_version());
}

} // namespace dlock::stores
