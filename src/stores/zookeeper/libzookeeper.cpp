#include "stores/zookeeper/libzookeeper.hpp"

#include "util/error.hpp"

#include <zookeeper/zookeeper_version.h>

#include <dlfcn.h>

namespace dlock::zookeeper {

const LibZookeeper& zoo()
{
  static const LibZookeeper loaded = [] {
    void* handle = ::dlopen("libzookeeper_mt.so.2", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      throw Error(ExitCode::config,
                  "zk:// needs the ZooKeeper C client (install the libzookeeper-mt2 package): {}",
                  ::dlerror());
    }
    LibZookeeper lib;
    std::string missing;
    auto note = [&missing](const char* name) {
      missing += std::string(missing.empty() ? "" : ", ") + name;
    };
#define DLOCK_ZOO_RESOLVE(name)                                                                    \
  lib.name = reinterpret_cast<decltype(&::name)>(::dlsym(handle, #name));                          \
  if (lib.name == nullptr) {                                                                       \
    note(#name);                                                                                   \
  }
    DLOCK_ZOO_FUNCTIONS(DLOCK_ZOO_RESOLVE)
#undef DLOCK_ZOO_RESOLVE
#define DLOCK_ZOO_READ(name)                                                                       \
  if (const auto* value = static_cast<const int*>(::dlsym(handle, #name))) {                       \
    lib.name = *value;                                                                             \
  } else {                                                                                         \
    note(#name);                                                                                   \
  }
    DLOCK_ZOO_CONSTANTS(DLOCK_ZOO_READ)
#undef DLOCK_ZOO_READ
    lib.open_acl = static_cast<struct ACL_vector*>(::dlsym(handle, "ZOO_OPEN_ACL_UNSAFE"));
    if (lib.open_acl == nullptr) {
      note("ZOO_OPEN_ACL_UNSAFE");
    }
    lib.creator_acl = static_cast<struct ACL_vector*>(::dlsym(handle, "ZOO_CREATOR_ALL_ACL"));
    if (lib.creator_acl == nullptr) {
      note("ZOO_CREATOR_ALL_ACL");
    }
    if (!missing.empty()) {
      throw Error(ExitCode::config, "zk:// needs ZooKeeper's C client 3.5 or later; the "
                                    "installed one lacks {}", missing);
    }
    lib.zoo_set_debug_level(static_cast<ZooLogLevel>(0)); // no logging of its own on stderr
    return lib; // the handle stays open: its functions are used until the process exits
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
