#pragma once

#include "util/shared_library.hpp"

#include <libpq-fe.h>

#include <string>

namespace dlock::postgres {

// The libpq functions dlock calls. Every libpq function the store uses is listed here.
#define DLOCK_LIBPQ_FUNCTIONS(X)                                                                   \
  X(PQconnectStartParams)                                                                          \
  X(PQconnectPoll)                                                                                 \
  X(PQstatus)                                                                                      \
  X(PQerrorMessage)                                                                                \
  X(PQsocket)                                                                                      \
  X(PQbackendPID)                                                                                  \
  X(PQfinish)                                                                                      \
  X(PQsetnonblocking)                                                                              \
  X(PQsetNoticeProcessor)                                                                          \
  X(PQsendQuery)                                                                                   \
  X(PQsendQueryParams)                                                                             \
  X(PQflush)                                                                                       \
  X(PQconsumeInput)                                                                                \
  X(PQisBusy)                                                                                      \
  X(PQgetResult)                                                                                   \
  X(PQresultStatus)                                                                                \
  X(PQresultErrorField)                                                                            \
  X(PQresultErrorMessage)                                                                          \
  X(PQclear)                                                                                       \
  X(PQntuples)                                                                                     \
  X(PQgetvalue)                                                                                    \
  X(PQgetisnull)                                                                                   \
  X(PQgetCancel)                                                                                   \
  X(PQcancel)                                                                                      \
  X(PQfreeCancel)                                                                                  \
  X(PQconninfoParse)                                                                               \
  X(PQconninfoFree)                                                                                \
  X(PQlibVersion)                                                                                  \
  X(PQnotifies)                                                                                    \
  X(PQfreemem)

// libpq, loaded on first use (dlopen of libpq.so.5) rather than linked: it pulls in some
// twenty libraries (OpenSSL, Kerberos, LDAP), which would double the start-up time of every
// dlock run, Redis ones included (README, "Performance").
struct LibPq {
  DLOCK_LIBRARY_POINTERS(DLOCK_LIBPQ_FUNCTIONS)
};

// Loads libpq once; throws Error(config) naming the package to install when it is missing.
const LibPq& pq();

// "libpq 15.8", or why it cannot be loaded, for --version.
std::string libpq_version();

} // namespace dlock::postgres
