#include "stores/etcd/libcurl.hpp"

#include "util/error.hpp"

#include <dlfcn.h>

namespace dlock::etcd {

const LibCurl& curl()
{
  static const LibCurl loaded = [] {
    void* handle = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      throw Error(ExitCode::config, "etcd:// needs libcurl (install the libcurl4 package): {}",
                  ::dlerror());
    }
    LibCurl lib;
    std::string missing;
#define DLOCK_LIBCURL_RESOLVE(name)                                                                \
  lib.name = reinterpret_cast<decltype(&::name)>(::dlsym(handle, #name));                          \
  if (lib.name == nullptr) {                                                                       \
    missing += std::string(missing.empty() ? "" : ", ") + #name;                                   \
  }
    DLOCK_LIBCURL_FUNCTIONS(DLOCK_LIBCURL_RESOLVE)
#undef DLOCK_LIBCURL_RESOLVE
    if (!missing.empty()) {
      throw Error(ExitCode::config, "etcd:// needs libcurl 7.x or later; the installed one lacks {}",
                  missing);
    }
    return lib; // the handle stays open: its functions are used until the process exits
  }();
  return loaded;
}

std::string libcurl_version()
{
  try {
    std::string text = curl().curl_version(); // "libcurl/7.88.1 OpenSSL/3.0.17 ..."
    std::string first = text.substr(0, text.find(' '));
    std::size_t slash = first.find('/');
    return slash == std::string::npos ? first : "libcurl " + first.substr(slash + 1);
  } catch (const Error&) {
    return "libcurl not installed";
  }
}

} // namespace dlock::etcd
