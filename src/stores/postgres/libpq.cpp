#include "stores/postgres/libpq.hpp"

#include "util/error.hpp"
#include "util/shared_library.hpp"

namespace dlock::postgres {

const LibPq& pq()
{
  static const LibPq loaded = util::load_library<LibPq>(
    {"libpq.so.5", "postgres://", "libpq", "libpq5", "10"},
    [](LibPq& lib, util::SharedLibrary& library) { DLOCK_LIBPQ_FUNCTIONS(DLOCK_LIBRARY_RESOLVE) });
  return loaded;
}

std::string libpq_version()
{
  try {
    int version = pq().PQlibVersion(); // e.g. 150008
    return fmt::format("libpq {}.{}", version / 10000, version % 10000);
  } catch (const Error& error) {
    return "libpq not installed";
  }
}

} // namespace dlock::postgres
