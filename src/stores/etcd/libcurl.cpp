#include "stores/etcd/libcurl.hpp"

#include "util/error.hpp"
#include "util/shared_library.hpp"

namespace dlock::etcd {

const LibCurl& curl()
{
  static const LibCurl loaded =
    util::load_library<LibCurl>({"libcurl.so.4", "etcd://", "libcurl", "libcurl4", "7.x"},
                                [](LibCurl& lib, util::SharedLibrary& library) {
                                  DLOCK_LIBCURL_FUNCTIONS(DLOCK_LIBRARY_RESOLVE)
                                });
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
