#include "stores/redis/keys.hpp"

#include <fmt/format.h>

namespace dlock::redis {

LockKeys LockKeys::make(std::string_view prefix, std::string_view name)
{
  std::string base = fmt::format("{}{{{}}}", prefix, name);
  return LockKeys{std::string(name), base,          base + ":fence",
                  base + ":holder",   base + ":waiters", base + ":queue",
                  base + ":queue-expiry", base + ":wake", base + ":wake:"};
}

std::string LockKeys::wake_for(std::string_view waiter_id) const
{
  return fair_wake_list(fair_wake_prefix, waiter_id);
}

std::string fair_wake_list(std::string_view fair_wake_prefix, std::string_view waiter_id)
{
  return std::string(fair_wake_prefix).append(waiter_id);
}

} // namespace dlock::redis
