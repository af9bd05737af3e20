#include "stores/open.hpp"

#include "stores/redis/redis_store.hpp"
#include "stores/redis/sentinel.hpp"
#include "stores/redis/tls.hpp"
#include "stores/redis/url.hpp"

#include <hiredis/hiredis.h>

namespace dlock::stores {

std::unique_ptr<lock::Store> open_store(const StoreConfig& config)
{
  if (config.urls.size() > 1) {
    throw Error(ExitCode::usage,
                "{} URLs given, but Redlock across several masters is not supported yet; give one "
                "--url",
                config.urls.size());
  }
  std::string url = config.urls.empty() ? "redis://127.0.0.1:6379" : config.urls.front();
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
  return std::make_unique<redis::RedisStore>(std::move(options), config.prefix, std::move(switches));
}

std::string library_versions()
{
  return fmt::format("hiredis {}.{}.{}; TLS: {}", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH,
                     redis::tls_description());
}

} // namespace dlock::stores
