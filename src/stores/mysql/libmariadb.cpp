#include "stores/mysql/libmariadb.hpp"

#include "util/error.hpp"

#include <dlfcn.h>

namespace dlock::mysql {

const LibMariaDb& mariadb()
{
  static const LibMariaDb loaded = [] {
    void* handle = ::dlopen("libmariadb.so.3", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      throw Error(ExitCode::config,
                  "mysql:// needs MariaDB Connector/C (install the libmariadb3 package): {}",
                  ::dlerror());
    }
    LibMariaDb lib;
    std::string missing;
#define DLOCK_LIBMARIADB_RESOLVE(name)                                                             \
  lib.name = reinterpret_cast<decltype(&::name)>(::dlsym(handle, #name));                          \
  if (lib.name == nullptr) {                                                                       \
    missing += std::string(missing.empty() ? "" : ", ") + #name;                                   \
  }
    DLOCK_LIBMARIADB_FUNCTIONS(DLOCK_LIBMARIADB_RESOLVE)
#undef DLOCK_LIBMARIADB_RESOLVE
    if (!missing.empty()) {
      throw Error(ExitCode::config, "mysql:// needs MariaDB Connector/C 3.0 or later; the "
                                    "installed one lacks {}", missing);
    }
    return lib; // the handle stays open: its functions are used until the process exits
  }();
  return loaded;
}

std::string libmariadb_version()
{
  try {
    return fmt::format("libmariadb {}", mariadb().mysql_get_client_info());
  } catch (const Error&) {
    return "libmariadb not installed";
  }
}

} // namespace dlock::mysql
