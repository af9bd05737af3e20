#pragma once

#include "lock/holder.hpp"
#include "lock/kind.hpp"
#include "util/json.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dlock::lock {

// What one node of a store made of several (Redlock) says about a lock.
struct NodeView {
  std::string node;    // the node's URL, password redacted
  std::string error{}; // non-empty: it did not answer
  bool held = false;
  HolderInfo holder{};
  std::int64_t ttl_ms = 0;
};

// One of the holders of a key held --shared or --limit N.
struct SlotHolder {
  HolderInfo holder;
  std::int64_t ttl_ms = 0; // its remaining lease
};

// What `status` and `list` show about one lock, read atomically by one script.
struct LockStatus {
  std::string name;
  bool held = false;
  LockKind kind{}; // how it is held (exclusive when free)
  // Held --shared or --limit: every holder, longest held first; holder and ttl_ms are then
  // the first one and the lease that ends last (when the key is free unless renewed).
  std::vector<SlotHolder> slots;
  HolderInfo holder;
  std::int64_t ttl_ms = 0; // remaining lease
  // Held only for the holder's --min-hold: its command ended (released); free in ttl_ms.
  bool command_ended = false;
  // Not held, but the last lease ended without a release (--lock-delay): it cannot be taken for
  // this long yet (holder: who held it, when the store knows). 0: free.
  std::int64_t delay_ms = 0;
  // The fencing counter (last token handed out); nothing when the store holds a value dlock
  // did not write there (another tenant's), shown as unknown.
  std::optional<std::int64_t> last_fence = 0;
  std::int64_t waiters = 0;        // live waiters, fair and unfair
  std::int64_t server_time_ms = 0; // the store's clock, so "held for" needs no client clock
  // A store of several nodes (Redlock): what each said, and how many make a majority.
  std::vector<NodeView> nodes;
  std::int64_t quorum = 0;

  // How long the current holder (or one slot holder) has held it, by the server's clock.
  std::int64_t held_ms() const { return held_ms(holder); }
  std::int64_t held_ms(const HolderInfo& who) const;
  // Adds the documented fields to a JSON object (status prints one, list an array of them).
  void add_json_fields(util::JsonObject& object) const;
};

} // namespace dlock::lock
