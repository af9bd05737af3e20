#include "stores/postgres/libpq.hpp"

#include "util/error.hpp"
#include "util/shared_library.hpp"

namespace dlock::postgres {

const LibPq& pq()
{
  static const LibPq loaded = [] {
    util::SharedLibrary library("libpq.so.5", "postgres://", "libpq", "libpq5");
    LibPq lib;
#define DLOCK_LIBPQ_RESOLVE(name) library.resolve(lib.name, #name);
    DLOCK_LIBPQ_FUNCTIONS(DLOCK_LIBPQ_RESOLVE)
#undef DLOCK_LIBPQ_RESOLVE
    library.require_all("10");
    return lib;
  }();
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
