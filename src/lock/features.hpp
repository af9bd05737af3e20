#pragma once

#include "util/error.hpp"

namespace dlock::lock {

class Store;

// What a command may ask of a store beyond one exclusive lock with a lease. Not every store
// can do each correctly; the man page's feature × store table lists the same as features.cpp.
enum class Feature {
  fair,       // --fair: one first-come, first-served queue of waiters
  shared,     // --shared: a read/write lock
  limit,      // --limit N: a counting semaphore
  coordinate, // wait, barrier, latch: one state per name besides the lock
  detached,   // acquire (--keep or not): a lock that outlives the dlock process that took it
  replicas,   // --wait-replicas N: a write acknowledged by the store's replicas
};

// Refuses (throws refusal()) a feature the store lacks. Called once, before anything is
// sent, so that nothing is left behind.
void require(const Store& store, Feature feature);
// The one line that refuses feature on store (Error(usage)), naming the stores that have it.
Error refusal(const Store& store, Feature feature);

} // namespace dlock::lock
