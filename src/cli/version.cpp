#include "cli/version.hpp"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include "redis/tls.hpp"

#ifndef DLOCK_VERSION
#define DLOCK_VERSION "0.0.0"
#endif
#ifndef DLOCK_GIT_REVISION
#define DLOCK_GIT_REVISION "unknown"
#endif

namespace dlock::cli {

std::string version_text()
{
  return fmt::format("dlock {} (git {}; hiredis {}.{}.{}; TLS: {})", DLOCK_VERSION,
                     DLOCK_GIT_REVISION, HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH,
                     redis::tls_description());
}

} // namespace dlock::cli
