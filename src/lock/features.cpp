#include "lock/features.hpp"

#include "lock/store.hpp"
#include "util/error.hpp"

#include <vector>

namespace dlock::lock {

namespace {

// One column of the feature table: a kind of store, as refusals name it, and what it does.
struct Column {
  StoreKind kind;
  std::string_view label;   // "etcd", as the list of stores that have a feature names it
  std::string_view schemes; // " (etcd://)", after the label
  // The schemes in a list of four stores or more, which would otherwise not fit a line.
  std::string_view schemes_in_long_list;
  FeatureSet features;
};

// The one feature table (the man page's "Features by store" says the same). A Cluster or
// Sentinel is one Redis store; independent masters (Redlock) cannot agree on a queue, a count
// or a state; a database session cannot outlive its process.
constexpr Column table[] = {
  {StoreKind::redis,
   "one Redis server, Sentinel or Cluster",
   " (redis://, rediss://, unix://)",
   "",
   {Feature::fair, Feature::shared, Feature::limit, Feature::coordinate, Feature::detached,
    Feature::replicas, Feature::min_hold, Feature::lock_delay, Feature::replace,
    Feature::supersede}},
  {StoreKind::redlock,
   "Redlock",
   "",
   "",
   {Feature::detached, Feature::replicas, Feature::min_hold, Feature::lock_delay,
    Feature::replace}},
  {StoreKind::postgres,
   "PostgreSQL",
   " (postgres://)",
   " (postgres://)",
   {Feature::shared, Feature::min_hold, Feature::lock_delay, Feature::replace, Feature::supersede}},
  {StoreKind::mysql,
   "MySQL or MariaDB",
   " (mysql://)",
   " (mysql://)",
   {Feature::min_hold, Feature::lock_delay, Feature::replace, Feature::supersede}},
  {StoreKind::etcd,
   "etcd",
   " (etcd://)",
   " (etcd://)",
   {Feature::fair, Feature::min_hold, Feature::lock_delay, Feature::replace, Feature::supersede}},
  {StoreKind::file,
   "files",
   " (file://)",
   " (file://)",
   {Feature::shared, Feature::limit, Feature::min_hold, Feature::lock_delay, Feature::replace,
    Feature::supersede}},
  {StoreKind::zookeeper,
   "ZooKeeper",
   " (zk://)",
   " (zk://)",
   {Feature::fair, Feature::shared, Feature::limit, Feature::coordinate, Feature::min_hold,
    Feature::lock_delay, Feature::replace, Feature::supersede}},
};

// The feature as the user asked for it; what it needs when that is more than a list of the
// stores that have it (a feature of Redis's forms only, and why); its word in the tests.
struct Row {
  std::string_view asked;
  std::string_view needs;
  std::string_view word;
};

Row row(Feature feature)
{
  switch (feature) {
  case Feature::fair:
    return {"--fair", "", "fair"};
  case Feature::shared:
    return {"--shared", "", "shared"};
  case Feature::limit:
    return {"--limit", "", "limit"};
  case Feature::coordinate:
    return {"wait, barrier and latch", "", "coordinate"};
  case Feature::detached:
    return {"acquire (a lock that outlives the dlock process that took it)",
            "Redis or Redlock, whose lease is not tied to a connection; use dlock run", "detached"};
  case Feature::replicas:
    return {"--wait-replicas", "Redis, whose WAIT counts the replicas a write reached", "replicas"};
  case Feature::min_hold:
    return {"--min-hold", "", "min_hold"};
  case Feature::lock_delay:
    return {"--lock-delay", "", "lock_delay"};
  case Feature::replace:
    return {"--replace", "", "replace"};
  case Feature::supersede:
    return {"--supersede", "", "supersede"};
  }
  return {"?", "?", "?"};
}

// "A, B and C": the stores of the table that have feature.
std::string stores_with(Feature feature)
{
  std::vector<const Column*> having;
  for (const Column& column : table) {
    if (column.features.has(feature)) {
      having.push_back(&column);
    }
  }
  std::string text;
  for (std::size_t i = 0; i < having.size(); ++i) {
    text += i == 0 ? "" : i + 1 == having.size() ? " and " : ", ";
    text += having[i]->label;
    text += having.size() > 3 ? having[i]->schemes_in_long_list : having[i]->schemes;
  }
  return text;
}

} // namespace

FeatureSet features_of(StoreKind kind)
{
  for (const Column& column : table) {
    if (column.kind == kind) {
      return column.features;
    }
  }
  return {};
}

std::initializer_list<StoreKind> store_kinds()
{
  static constexpr std::initializer_list<StoreKind> kinds{
    StoreKind::redis, StoreKind::redlock, StoreKind::postgres, StoreKind::mysql,
    StoreKind::etcd,  StoreKind::file,    StoreKind::zookeeper};
  return kinds;
}

std::string_view feature_word(Feature feature) { return row(feature).word; }

Error refusal(const Store& store, Feature feature)
{
  Row r = row(feature);
  return Error(ExitCode::usage, "{}: not available on {}; it needs {}", r.asked,
               store.traits().name, r.needs.empty() ? stores_with(feature) : std::string(r.needs));
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
