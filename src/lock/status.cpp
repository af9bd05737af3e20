#include "lock/status.hpp"

#include "util/json.hpp"

#include <algorithm>

namespace dlock::lock {

std::int64_t LockStatus::held_ms(const HolderInfo& who) const
{
  return held && who.acquired_ms > 0 ? std::max<std::int64_t>(0, server_time_ms - who.acquired_ms)
                                     : 0;
}

void LockStatus::add_json_fields(util::JsonObject& object) const
{
  object.add("key", name).add("held", held);
  if (held) {
    util::JsonObject holder_json;
    holder_json.add("host", holder.host)
      .add("pid", holder.pid)
      .add("user", holder.user)
      .add("command", holder.command)
      .add("note", holder.note)
      .add("value", holder.value);
    object.add("holder", holder_json);
    if (holder.acquired_ms > 0) {
      object.add("acquired_at", util::format_rfc3339(holder.acquired_ms));
    } else {
      object.add_null("acquired_at");
    }
    object.add("held_ms", held_ms()).add("ttl_ms", ttl_ms).add("fencing_token", holder.fence);
  } else {
    object.add_null("holder").add_null("acquired_at").add_null("held_ms").add_null("ttl_ms");
    object.add_null("fencing_token");
  }
  // --min-hold: held only for it, its command ended; --lock-delay: free in delay_ms, and who
  // ended without a release
  object.add("command_ended", held && command_ended).add("delay_ms", held ? 0 : delay_ms);
  if (!held && delay_ms > 0 && !holder.host.empty()) {
    object.add("delayed_by", util::JsonObject()
                               .add("host", holder.host)
                               .add("pid", holder.pid)
                               .add("user", holder.user)
                               .add("note", holder.note));
  }
  if (last_fence) {
    object.add("last_fencing_token", *last_fence);
  } else {
    object.add_null("last_fencing_token");
  }
  object.add("waiters", waiters);
  object.add("kind", kind.mode == LockKind::Mode::limit    ? "limit"
                     : kind.mode == LockKind::Mode::shared ? "shared"
                                                           : "exclusive");
  if (kind.mode == LockKind::Mode::limit) {
    object.add("limit", static_cast<std::int64_t>(kind.limit));
  }
  if (!slots.empty()) {
    std::vector<util::JsonObject> holders(slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const HolderInfo& slot = slots[i].holder;
      holders[i]
        .add("host", slot.host)
        .add("pid", slot.pid)
        .add("user", slot.user)
        .add("command", slot.command)
        .add("note", slot.note);
      if (slot.acquired_ms > 0) {
        holders[i].add("acquired_at", util::format_rfc3339(slot.acquired_ms));
      } else {
        holders[i].add_null("acquired_at");
      }
      holders[i].add("ttl_ms", slots[i].ttl_ms).add("fencing_token", slot.fence);
    }
    object.add("holders", holders);
  }
  if (!nodes.empty()) {
    std::vector<util::JsonObject> views(nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const NodeView& node = nodes[i];
      views[i].add("url", node.node).add("reachable", node.error.empty()).add("held", node.held);
      if (node.held) {
        views[i]
          .add("pid", node.holder.pid)
          .add("host", node.holder.host)
          .add("fencing_token", node.holder.fence)
          .add("ttl_ms", node.ttl_ms);
      }
      if (!node.error.empty()) {
        views[i].add("error", node.error);
      }
    }
    object.add("quorum", quorum).add("nodes", views);
  }
}

} // namespace dlock::lock
