#pragma once

#include "lock/holder.hpp"
#include "util/json.hpp"

#include <string>
#include <vector>

namespace dlock::lock {

// What `status` and `list` show about one lock, read atomically by one script.
struct LockStatus {
  std::string name;
  bool held = false;
  HolderInfo holder;
  std::int64_t ttl_ms = 0;         // remaining lease
  std::int64_t last_fence = 0;     // the fencing counter (last token handed out)
  std::int64_t waiters = 0;        // live waiters, fair and unfair
  std::int64_t server_time_ms = 0; // the store's clock, so "held for" needs no client clock

  // How long the current holder has held it, by the server's clock.
  std::int64_t held_ms() const;
  // Adds the documented fields to a JSON object (status prints one, list an array of them).
  void add_json_fields(util::JsonObject& object) const;
};

} // namespace dlock::lock
