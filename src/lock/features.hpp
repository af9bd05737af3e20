#pragma once

#include "util/error.hpp"

#include <initializer_list>
#include <optional>
#include <string_view>

namespace dlock::lock {

class Store;

// What a command may ask of a store beyond one exclusive lock with a lease. Not every store
// can do each correctly; the man page's feature × store table lists the same as features.cpp.
enum class Feature {
  fair,       // --fair: one first-come, first-served queue of waiters
  shared,     // --shared: a read/write lock
  limit,      // --limit N: a counting semaphore
  coordinate, // wait, barrier, latch: one state per name besides the lock
  detached,   // acquire: a lock that outlives every process (a lease, not a session)
  keep,       // acquire --keep: a lock kept by a process of its own, past the dlock that took it
  replicas,   // --wait-replicas N: a write acknowledged by the store's replicas
  min_hold,   // --min-hold D: the lock outlives its holder's release until D from acquisition
  lock_delay, // --lock-delay D: a lease that ended without a release closes the lock for D
  replace,    // --replace: the holder is asked through the store to stand down
  supersede,  // --supersede: the newest waiter makes older ones give up
  elect,      // elect and leader --watch: a first-come campaign, and leadership watched
  history,    // history: a capped log of each lock's events, kept in the store
};

// Every kind of store dlock opens (stores/open.cpp chooses one by URL), as the feature table
// knows them: Redis in each of its forms (one server, Sentinel, Cluster), Redlock, and so on.
enum class StoreKind { redis, redlock, postgres, mysql, etcd, file, zookeeper };

// The features a store has, as one value (StoreTraits::features), and the column of the table
// they came from (features_of), so that a refusal can say why that store lacks one.
class FeatureSet {
public:
  constexpr FeatureSet() = default;
  constexpr FeatureSet(std::initializer_list<Feature> features)
  {
    for (Feature feature : features) {
      m_bits |= bit(feature);
    }
  }
  // Whether feature is in the set.
  constexpr bool has(Feature feature) const noexcept { return (m_bits & bit(feature)) != 0; }
  // The kind of store whose column this is (features_of); nullopt for a set made otherwise.
  constexpr std::optional<StoreKind> kind() const noexcept { return m_kind; }
  // This set, as kind's column.
  constexpr FeatureSet of(StoreKind kind) const noexcept
  {
    FeatureSet set = *this;
    set.m_kind = kind;
    return set;
  }

private:
  static constexpr unsigned bit(Feature feature) { return 1U << static_cast<unsigned>(feature); }
  unsigned m_bits = 0;
  std::optional<StoreKind> m_kind;
};

// The features of a kind of store: its column of the one feature table (features.cpp), which
// generates the refusal texts, gives each store its StoreTraits::features, and which the man
// page's tables and the tests' STORE_FEATURES are checked against (features_test.cpp).
FeatureSet features_of(StoreKind kind);
// Every kind of store, in the table's order.
std::initializer_list<StoreKind> store_kinds();
// A feature as the tests' STORE_FEATURES words name it: "fair", "shared", "coordinate".
std::string_view feature_word(Feature feature);
// Every feature, in the order the generated tables list them.
std::initializer_list<Feature> every_feature();
// A feature as the tables' rows name it: "--limit N", "wait/barrier/latch".
std::string_view feature_label(Feature feature);
// A kind of store as the tables' columns name it: "Redis", "file://".
std::string_view store_label(StoreKind kind);
// Why kind lacks feature: what in that store makes it impossible to do correctly, which the
// tables generated from this one give under each "no"; empty when it has the feature.
std::string_view why_not(StoreKind kind, Feature feature);

class Coordination;

// Refuses (throws refusal()) a feature the store lacks. Called once, before anything is
// sent, so that nothing is left behind.
void require(const Store& store, Feature feature);
// The store's coordination (wait, barrier, latch), asked for once before anything is sent;
// refuses (throws refusal(Feature::coordinate)) a store that has none.
Coordination& require_coordination(Store& store);
class History;
// The store's history (dlock history), asked for once before anything is sent; refuses
// (throws refusal(Feature::history)) a store that keeps none.
History& require_history(Store& store);
// The one line that refuses feature on store (Error(usage)), naming the stores that have it.
Error refusal(const Store& store, Feature feature);

} // namespace dlock::lock
