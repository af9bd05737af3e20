#include "stores/postgres/semaphore.hpp"

#include <fmt/format.h>

namespace dlock::postgres {

namespace {
constexpr std::int64_t two_32 = std::int64_t(1) << 32;
}

std::string Semaphore::offset_sql(const char* objid_column)
{
  return fmt::format("(({}::pg_catalog.int8 - $2::pg_catalog.int8 + 4294967296) % 4294967296)",
                     objid_column);
}

std::string Semaphore::slot_arg_sql(const char* i)
{
  std::string u = fmt::format("(($2::pg_catalog.int8 + 1 + {}) % 4294967296)", i);
  return fmt::format("(CASE WHEN {0} >= 2147483648 THEN {0} - 4294967296 ELSE {0} END)::int4", u);
}

std::optional<int> Semaphore::slot_of(std::int64_t offset)
{
  if (offset >= 1 && offset <= max_limit) {
    return int(offset - 1);
  }
  return std::nullopt;
}

std::optional<int> Semaphore::limit_of_marker(std::int64_t offset)
{
  std::int64_t n = two_32 - offset;
  if (offset > 0 && n >= 2 && n <= max_limit) {
    return int(n);
  }
  return std::nullopt;
}

} // namespace dlock::postgres
