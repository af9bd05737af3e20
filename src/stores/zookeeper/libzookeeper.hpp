#pragma once

#include "util/shared_library.hpp"

#include <zookeeper/zookeeper.h>

#include <string>

namespace dlock::zookeeper {

// The ZooKeeper C client functions dlock calls. Every one the store uses is listed here.
#define DLOCK_ZOO_FUNCTIONS(X)                                                                     \
  X(zookeeper_init)                                                                                \
  X(zookeeper_close)                                                                               \
  X(zoo_state)                                                                                     \
  X(zoo_recv_timeout)                                                                              \
  X(zoo_client_id)                                                                                 \
  X(zoo_acreate2)                                                                                  \
  X(zoo_adelete)                                                                                   \
  X(zoo_aset)                                                                                      \
  X(zoo_aexists)                                                                                   \
  X(zoo_awexists)                                                                                  \
  X(zoo_aget)                                                                                      \
  X(zoo_aget_children)                                                                             \
  X(zoo_amulti)                                                                                    \
  X(zoo_create_op_init)                                                                            \
  X(zoo_delete_op_init)                                                                            \
  X(zoo_add_auth)                                                                                  \
  X(zoo_set_debug_level)                                                                           \
  X(zoo_set_servers_resolution_delay)                                                              \
  X(zerror)

// The library's constants, which it exports as data rather than macros.
#define DLOCK_ZOO_CONSTANTS(X)                                                                     \
  X(ZOO_CONNECTED_STATE)                                                                           \
  X(ZOO_CONNECTING_STATE)                                                                          \
  X(ZOO_ASSOCIATING_STATE)                                                                         \
  X(ZOO_EXPIRED_SESSION_STATE)                                                                     \
  X(ZOO_AUTH_FAILED_STATE)                                                                         \
  X(ZOO_SESSION_EVENT)                                                                             \
  X(ZOO_DELETED_EVENT)                                                                             \
  X(ZOO_CHILD_EVENT)                                                                               \
  X(ZOO_PERSISTENT)                                                                                \
  X(ZOO_EPHEMERAL)                                                                                 \
  X(ZOO_CONTAINER)                                                                                 \
  X(ZOO_EPHEMERAL_SEQUENTIAL)                                                                      \
  X(ZOO_PERSISTENT_SEQUENTIAL)

// libzookeeper_mt, loaded on first use (dlopen of libzookeeper_mt.so.2) rather than linked,
// as libpq is: a Redis run then neither loads it nor pays for its start-up.
struct LibZookeeper {
  DLOCK_LIBRARY_POINTERS(DLOCK_ZOO_FUNCTIONS)
#define DLOCK_ZOO_CONSTANT(name) int name = 0;
  DLOCK_ZOO_CONSTANTS(DLOCK_ZOO_CONSTANT)
#undef DLOCK_ZOO_CONSTANT
  struct ACL_vector* open_acl = nullptr;    // ZOO_OPEN_ACL_UNSAFE (world:anyone, all rights)
  struct ACL_vector* creator_acl = nullptr; // ZOO_CREATOR_ALL_ACL (the creator's identities)
};

// Loads the library once; throws Error(config) naming the package to install when it is missing.
const LibZookeeper& zoo();

// "ZooKeeper C client 3.8.0", or why it cannot be loaded, for --version.
std::string libzookeeper_version();

} // namespace dlock::zookeeper
