#include "lock/features.hpp"

#include "lock/store.hpp"
#include "util/error.hpp"

namespace dlock::lock {

namespace {

// The feature as the user asked for it, and the stores that have it (one line of the man
// page's feature × store table).
struct Row {
  const char* asked;
  const char* stores;
};

Row row(Feature feature)
{
  switch (feature) {
  case Feature::fair:
    return {"--fair", "one Redis server, Sentinel or Cluster (redis://, rediss://, unix://), "
                      "etcd (etcd://) and ZooKeeper (zk://)"};
  case Feature::shared:
    return {"--shared", "one Redis server, Sentinel or Cluster, PostgreSQL (postgres://), "
                        "files (file://) and ZooKeeper (zk://)"};
  case Feature::limit:
    return {"--limit", "one Redis server, Sentinel or Cluster (redis://, rediss://, unix://) "
                       "and files (file://)"};
  case Feature::coordinate:
    return {"wait, barrier and latch",
            "one Redis server, Sentinel or Cluster (redis://, rediss://, unix://)"};
  case Feature::detached:
    return {"acquire (a lock that outlives the dlock process that took it)",
            "Redis or Redlock, whose lease is not tied to a connection; use dlock run"};
  case Feature::replicas:
    return {"--wait-replicas", "Redis, whose WAIT counts the replicas a write reached"};
  }
  return {"?", "?"};
}

} // namespace

Error refusal(const Store& store, Feature feature)
{
  Row r = row(feature);
  return Error(ExitCode::usage, "{}: not available on {}; it needs {}", r.asked,
               store.traits().name, r.stores);
}

void require(const Store& store, Feature feature)
{
  if (!store.traits().features.has(feature)) {
    throw refusal(store, feature);
  }
}

Coordination& require_coordination(Store& store)
{
  Coordination* coordination = store.coordination();
  if (coordination == nullptr) {
    throw refusal(store, Feature::coordinate);
  }
  return *coordination;
}

} // namespace dlock::lock
