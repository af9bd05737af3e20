#include "stores/open.hpp"

#include "stores/redis/redis_store.hpp"
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
  redis::ConnectOptions options;
  options.endpoint = redis::parse_url(config.urls.empty() ? "redis://127.0.0.1:6379" : config.urls.front());
  options.password = config.password;
  options.connect_timeout = config.request_timeout;
  options.tls = config.tls;
  return std::make_unique<redis::RedisStore>(std::move(options), config.prefix);
}

std::string library_versions()
{
  return fmt::format("hiredis {}.{}.{}; TLS: {}", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH,
                     redis::tls_description());
}

} // namespace dlock::stores
