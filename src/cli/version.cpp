#include "cli/version.hpp"

#include "stores/open.hpp"

#include <fmt/format.h>

#ifndef DLOCK_VERSION
#define DLOCK_VERSION "0.0.0"
#endif
#ifndef DLOCK_GIT_REVISION
#define DLOCK_GIT_REVISION "unknown"
#endif

namespace dlock::cli {

std::string version_text()
{
  return fmt::format("dlock {} (git {}; {})", DLOCK_VERSION, DLOCK_GIT_REVISION,
                     stores::library_versions());
}

} // namespace dlock::cli
