#include "stores/mysql/libmariadb.hpp"

#include "util/error.hpp"
#include "util/shared_library.hpp"

#include <dlfcn.h>

#include <cstdint>

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

void skip_tls_config()
{
  static const bool done = [] {
    if (mariadb().mysql_get_client_version() >= 30400) {
      return false; // TLS by default: the system's settings apply
    }
    // loaded already as the library's own dependency, if it uses OpenSSL 3
    void* crypto = ::dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (crypto == nullptr) {
      return false;
    }
    using Init = int(std::uint64_t, const void*);
    if (auto* init = reinterpret_cast<Init*>(::dlsym(crypto, "OPENSSL_init_crypto"))) {
      constexpr std::uint64_t no_load_config = 0x80; // OPENSSL_INIT_NO_LOAD_CONFIG
      init(no_load_config, nullptr);
    }
    ::dlclose(crypto); // the reference this dlopen added
    return true;
  }();
  (void)done;
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
