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
    Feature::keep, Feature::replicas, Feature::min_hold, Feature::lock_delay, Feature::replace,
    Feature::supersede, Feature::elect, Feature::history}},
  {StoreKind::redlock,
   "Redlock",
   "",
   "",
   {Feature::detached, Feature::keep, Feature::replicas, Feature::min_hold, Feature::lock_delay,
    Feature::replace}},
  {StoreKind::postgres,
   "PostgreSQL",
   " (postgres://)",
   " (postgres://)",
   {Feature::fair, Feature::shared, Feature::limit, Feature::coordinate, Feature::keep,
    Feature::min_hold, Feature::lock_delay, Feature::replace, Feature::supersede, Feature::elect,
    Feature::history}},
  {StoreKind::mysql,
   "MySQL or MariaDB",
   " (mysql://)",
   " (mysql://)",
   {Feature::fair, Feature::shared, Feature::limit, Feature::coordinate, Feature::keep,
    Feature::min_hold, Feature::lock_delay, Feature::replace, Feature::supersede, Feature::elect,
    Feature::history}},
  {StoreKind::etcd,
   "etcd",
   " (etcd://)",
   " (etcd://)",
   {Feature::fair, Feature::shared, Feature::limit, Feature::coordinate, Feature::detached,
    Feature::keep, Feature::min_hold, Feature::lock_delay, Feature::replace, Feature::supersede,
    Feature::elect, Feature::history}},
  {StoreKind::file,
   "files",
   " (file://)",
   " (file://)",
   {Feature::fair, Feature::shared, Feature::limit, Feature::coordinate, Feature::keep,
    Feature::min_hold, Feature::lock_delay, Feature::replace, Feature::supersede, Feature::elect,
    Feature::history}},
  {StoreKind::zookeeper,
   "ZooKeeper",
   " (zk://)",
   " (zk://)",
   {Feature::fair, Feature::shared, Feature::limit, Feature::coordinate, Feature::keep,
    Feature::min_hold, Feature::lock_delay, Feature::replace, Feature::supersede, Feature::elect,
    Feature::history}},
};

// Why a store lacks a feature: each no of the table, with what makes it impossible there.
struct Lack {
  StoreKind kind;
  Feature feature;
  std::string_view why;
};

constexpr std::string_view masters_disagree =
  "independent masters cannot agree on one state: a queue, a count of holders, a barrier's "
  "arrivals, the newest waiter";
constexpr std::string_view session_is_lease =
  "the lock is the database session, which ends with its process; acquire --keep keeps it in "
  "a process of its own";

constexpr Lack lacks[] = {
  {StoreKind::redlock, Feature::fair, masters_disagree},
  {StoreKind::redlock, Feature::shared, masters_disagree},
  {StoreKind::redlock, Feature::limit, masters_disagree},
  {StoreKind::redlock, Feature::coordinate, masters_disagree},
  {StoreKind::redlock, Feature::supersede, masters_disagree},
  {StoreKind::redlock, Feature::elect, masters_disagree},
  {StoreKind::redlock, Feature::history,
   "independent masters cannot agree on one order of events; give one of them as --url"},
  {StoreKind::postgres, Feature::detached, session_is_lease},
  {StoreKind::mysql, Feature::detached, session_is_lease},
  {StoreKind::zookeeper, Feature::detached,
   "the lock is an ephemeral node of the session, which ends with its process; acquire --keep "
   "keeps it in a process of its own"},
  {StoreKind::file, Feature::detached,
   "the lock is an flock(2) on a descriptor, which goes with its process; acquire --keep keeps "
   "it in a process of its own"},
  {StoreKind::postgres, Feature::replicas,
   "advisory locks live in the primary's memory and are not replicated: the lock is the "
   "session, which a failover ends"},
  {StoreKind::mysql, Feature::replicas,
   "GET_LOCK names live in the server's memory and are not replicated: the lock is the "
   "session, which a failover ends"},
  {StoreKind::etcd, Feature::replicas,
   "a Raft majority has every write before etcd answers: there is nothing more to wait for"},
  {StoreKind::zookeeper, Feature::replicas,
   "a quorum has every write before ZooKeeper answers: there is nothing more to wait for"},
  {StoreKind::file, Feature::replicas, "one directory on one host has no replicas"},
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
    return {"acquire without --keep (a lock no process keeps)", "", "detached"};
  case Feature::keep:
    return {"acquire --keep", "", "keep"};
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
  case Feature::elect:
    return {"elect and leader --watch", "", "elect"};
  case Feature::history:
    return {"history", "", "history"};
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
      return column.features.of(kind);
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

std::initializer_list<Feature> every_feature()
{
  static constexpr std::initializer_list<Feature> features{
    Feature::shared,     Feature::limit,   Feature::fair,      Feature::coordinate,
    Feature::detached,   Feature::keep,    Feature::replicas,  Feature::min_hold,
    Feature::lock_delay, Feature::replace, Feature::supersede, Feature::elect,
    Feature::history};
  return features;
}

std::string_view feature_label(Feature feature)
{
  switch (feature) {
  case Feature::limit:
    return "--limit N";
  case Feature::coordinate:
    return "wait/barrier/latch";
  case Feature::detached:
    return "acquire";
  case Feature::elect:
    return "elect, leader --watch";
  default:
    return row(feature).asked;
  }
}

std::string_view store_label(StoreKind kind)
{
  switch (kind) {
  case StoreKind::redis:
    return "Redis";
  case StoreKind::redlock:
    return "Redlock";
  case StoreKind::postgres:
    return "PostgreSQL";
  case StoreKind::mysql:
    return "MySQL";
  case StoreKind::etcd:
    return "etcd";
  case StoreKind::file:
    return "file://";
  case StoreKind::zookeeper:
    return "ZooKeeper";
  }
  return "?";
}

std::string_view why_not(StoreKind kind, Feature feature)
{
  for (const Lack& lack : lacks) {
    if (lack.kind == kind && lack.feature == feature && !features_of(kind).has(feature)) {
      return lack.why;
    }
  }
  return {};
}

Error refusal(const Store& store, Feature feature)
{
  Row r = row(feature);
  std::optional<StoreKind> kind = store.traits().features.kind();
  std::string_view why = kind ? why_not(*kind, feature) : std::string_view();
  return Error(ExitCode::usage, "{}: not available on {}{}{}; it needs {}", r.asked,
               store.traits().name, why.empty() ? "" : ": ", why,
               r.needs.empty() ? stores_with(feature) : std::string(r.needs));
}

void require(const Store& store, Feature feature)
{
  if (!store.traits().features.has(feature)) {
    throw refusal(store, feature);
  }
}

History& require_history(Store& store)
{
  History* history = store.history();
  if (history == nullptr) {
    throw refusal(store, Feature::history);
  }
  return *history;
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
