#pragma once

// The C interface of dlock-tls.so, the module that holds everything that needs OpenSSL and
// hiredis_ssl. dlock loads it with dlopen only for rediss:// URLs, because relocating
// libssl and libcrypto at every start would cost more CPU than a whole uncontended lock cycle.
// Errors come back as a message and an exit status; no C++ exception crosses the boundary.

#include <hiredis/hiredis.h>

#include <cstddef>

extern "C" {

// Made once per process from --tls-* options; nullptr on failure (message in error).
typedef void* (*dlock_tls_create_fn)(const char* ca_file, const char* cert_file,
                                     const char* key_file, int* exit_code, char* error,
                                     std::size_t error_size);
// Handshake on a connected blocking context and certificate check for name; 0 on success.
typedef int (*dlock_tls_secure_fn)(void* tls, redisContext* context, const char* name,
                                   int* exit_code, char* error, std::size_t error_size);
typedef void (*dlock_tls_free_fn)(void* tls);
// "OpenSSL 3.0.x ..." for --version.
typedef const char* (*dlock_tls_version_fn)();
}
