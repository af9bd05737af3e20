#include "stores/postgres/libpq.hpp"

#include "util/error.hpp"

#include <dlfcn.h>

namespace dlock::postgres {

const LibPq& pq()
{
  static const LibPq loaded = [] {
    void* handle = ::dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      throw Error(ExitCode::config, "postgres:// needs libpq (install the libpq5 package): {}",
                  ::dlerror());
    }
    LibPq lib;
    std::string missing;
#define DLOCK_LIBPQ_RESOLVE(name)                                                                  \
  lib.name = reinterpret_cast<decltype(&::name)>(::dlsym(handle, #name));                          \
  if (lib.name == nullptr) {                                                                       \
    missing += std::string(missing.empty() ? "" : ", ") + #name;                                   \
  }
    DLOCK_LIBPQ_FUNCTIONS(DLOCK_LIBPQ_RESOLVE)
#undef DLOCK_LIBPQ_RESOLVE
    if (!missing.empty()) {
      throw Error(ExitCode::config, "postgres:// needs libpq 10 or later; the installed one "
                                    "lacks {}", missing);
    }
    return lib; // the handle stays open: its functions are used until the process exits
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
