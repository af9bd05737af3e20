#pragma once

#include "util/shared_library.hpp"

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#include <string>

namespace dlock::etcd {

// The libcurl functions dlock calls. Every libcurl function the etcd store uses is listed here.
#define DLOCK_LIBCURL_FUNCTIONS(X)                                                                 \
  X(curl_easy_init)                                                                                \
  X(curl_easy_cleanup)                                                                             \
  X(curl_easy_setopt)                                                                              \
  X(curl_easy_getinfo)                                                                             \
  X(curl_easy_strerror)                                                                            \
  X(curl_multi_init)                                                                               \
  X(curl_multi_cleanup)                                                                            \
  X(curl_multi_add_handle)                                                                         \
  X(curl_multi_remove_handle)                                                                      \
  X(curl_multi_setopt)                                                                             \
  X(curl_multi_socket_action)                                                                      \
  X(curl_multi_info_read)                                                                          \
  X(curl_slist_append)                                                                             \
  X(curl_slist_free_all)                                                                           \
  X(curl_version)

// libcurl, loaded on first use (dlopen of libcurl.so.4) rather than linked: with its TLS,
// HTTP/2 and IDN libraries it would add to the start-up time of every dlock run, Redis ones
// included, while only etcd:// uses it (README, "Performance").
struct LibCurl {
  DLOCK_LIBRARY_POINTERS(DLOCK_LIBCURL_FUNCTIONS)
};

// Loads libcurl once; throws Error(config) naming the package to install when it is missing.
const LibCurl& curl();

// "libcurl 7.88.1", or why it cannot be loaded, for --version.
std::string libcurl_version();

} // namespace dlock::etcd
