#include "stores/mysql/libmariadb.hpp"

#include "util/error.hpp"
#include "util/shared_library.hpp"

namespace dlock::mysql {

const LibMariaDb& mariadb()
{
  static const LibMariaDb loaded = [] {
    util::SharedLibrary library("libmariadb.so.3", "mysql://", "MariaDB Connector/C",
                                "libmariadb3");
    LibMariaDb lib;
#define DLOCK_LIBMARIADB_RESOLVE(name) library.resolve(lib.name, #name);
    DLOCK_LIBMARIADB_FUNCTIONS(DLOCK_LIBMARIADB_RESOLVE)
#undef DLOCK_LIBMARIADB_RESOLVE
    library.require_all("3.0");
    return lib;
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
