#include "stores/zookeeper/libzookeeper.hpp"

#include "util/error.hpp"
#include "util/shared_library.hpp"

#include <zookeeper/zookeeper_version.h>

namespace dlock::zookeeper {

const LibZookeeper& zoo()
{
  static const LibZookeeper loaded = [] {
    LibZookeeper zk = util::load_library<LibZookeeper>(
      {"libzookeeper_mt.so.2", "zk://", "the ZooKeeper C client", "libzookeeper-mt2", "3.6"},
      [](LibZookeeper& lib, util::SharedLibrary& library) {
        DLOCK_ZOO_FUNCTIONS(DLOCK_LIBRARY_RESOLVE)
#define DLOCK_ZOO_READ(name)                                                                       \
  if (const auto* value = static_cast<const int*>(library.address(#name))) {                       \
    lib.name = *value;                                                                             \
  }
        DLOCK_ZOO_CONSTANTS(DLOCK_ZOO_READ)
#undef DLOCK_ZOO_READ
        lib.open_acl = static_cast<struct ACL_vector*>(library.address("ZOO_OPEN_ACL_UNSAFE"));
        lib.creator_acl = static_cast<struct ACL_vector*>(library.address("ZOO_CREATOR_ALL_ACL"));
      });
    zk.zoo_set_debug_level(static_cast<ZooLogLevel>(0)); // no logging of its own on stderr
    return zk;
  }();
  return loaded;
}

std::string libzookeeper_version()
{
  try {
    zoo();
    return "ZooKeeper C client " ZOO_VERSION;
  } catch (const Error&) {
    return "ZooKeeper C client not installed";
  }
}

} // namespace dlock::zookeeper
