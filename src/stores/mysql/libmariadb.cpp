#include "stores/mysql/libmariadb.hpp"

#include "util/error.hpp"
#include "util/shared_library.hpp"

namespace dlock::mysql {

const LibMariaDb& mariadb()
{
  static const LibMariaDb loaded = util::load_library<LibMariaDb>(
    {"libmariadb.so.3", "mysql://", "MariaDB Connector/C", "libmariadb3", "3.0"},
    [](LibMariaDb& lib, util::SharedLibrary& library) {
      DLOCK_LIBMARIADB_FUNCTIONS(DLOCK_LIBRARY_RESOLVE)
    });
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
