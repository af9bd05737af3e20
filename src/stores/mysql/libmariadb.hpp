#pragma once

#include "util/shared_library.hpp"

#include <mysql.h>

#include <string>

namespace dlock::mysql {

// The MariaDB Connector/C functions dlock calls (its non-blocking API: each *_start returns
// what the library waits for, MYSQL_WAIT_READ, _WRITE, _EXCEPT or _TIMEOUT, and *_cont goes
// on once it is there). Every function the store uses is listed here.
#define DLOCK_LIBMARIADB_FUNCTIONS(X)                                                              \
  X(mysql_init)                                                                                    \
  X(mysql_options)                                                                                 \
  X(mysql_real_connect_start)                                                                      \
  X(mysql_real_connect_cont)                                                                       \
  X(mysql_real_query_start)                                                                        \
  X(mysql_real_query_cont)                                                                         \
  X(mysql_store_result_start)                                                                      \
  X(mysql_store_result_cont)                                                                       \
  X(mysql_more_results)                                                                            \
  X(mysql_next_result_start)                                                                       \
  X(mysql_next_result_cont)                                                                        \
  X(mysql_free_result)                                                                             \
  X(mysql_num_fields)                                                                              \
  X(mysql_fetch_row)                                                                               \
  X(mysql_fetch_lengths)                                                                           \
  X(mysql_errno)                                                                                   \
  X(mysql_error)                                                                                   \
  X(mysql_get_socket)                                                                              \
  X(mysql_get_timeout_value_ms)                                                                    \
  X(mysql_thread_id)                                                                               \
  X(mysql_close)                                                                                   \
  X(mysql_get_client_info)                                                                         \
  X(mysql_get_client_version)

// MariaDB Connector/C, loaded on first use (dlopen of libmariadb.so.3) rather than linked,
// as libpq is (stores/postgres/libpq.hpp): it pulls in OpenSSL, zlib and GnuTLS or the like,
// which every dlock run would otherwise pay for at start-up, Redis ones included.
struct LibMariaDb {
  DLOCK_LIBRARY_POINTERS(DLOCK_LIBMARIADB_FUNCTIONS)
};

// Loads the library once; throws Error(config) naming the package to install when missing.
const LibMariaDb& mariadb();

// Before the first session of a process that asks for no TLS: the library (before 3.4, which
// asks for TLS by default) starts OpenSSL at its first use all the same, which reads the
// system's openssl.cnf (a third of a millisecond): it is told not to. Nothing when the library
// uses another TLS library, or TLS was asked for.
void skip_tls_config();

// "libmariadb 3.3.20", or why it cannot be loaded, for --version.
std::string libmariadb_version();

} // namespace dlock::mysql
