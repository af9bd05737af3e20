#include "commands/status.hpp"

#include "util/json.hpp"
#include "util/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace dlock::commands {

namespace {

using util::format_duration;
using util::Millis;

// The fencing counter, or "unknown" when the store holds a value dlock did not write.
std::string last_fence(const lock::LockStatus& status)
{
  return status.last_fence ? std::to_string(*status.last_fence) : "unknown";
}

// For a lock on several nodes (Redlock): how many hold it, and what each said.
std::string human_nodes(const lock::LockStatus& status)
{
  if (status.nodes.empty()) {
    return {};
  }
  std::size_t held = 0;
  for (const lock::NodeView& node : status.nodes) {
    // Held: the nodes that name the holder; free: every node that holds it for anyone.
    bool counts = node.held && (!status.held || node.holder.same_holder(status.holder));
    held += counts ? 1 : 0;
  }
  std::string out = fmt::format("{:<15}{} of {} hold it (a majority is {})\n", "nodes:", held,
                                status.nodes.size(), status.quorum);
  for (const lock::NodeView& node : status.nodes) {
    std::string said = !node.error.empty() ? "no answer: " + util::printable(node.error)
                       : !node.held
                         ? std::string("free")
                         : fmt::format("held by {} pid {}, lease left {}", holder_name(node.holder),
                                       node.holder.pid, format_duration(Millis(node.ttl_ms)));
    out += fmt::format("{:<15}{}: {}\n", "", node.node, said);
  }
  return out;
}

// A key held --shared or --limit N: each holder on a line of its own.
std::string human_slots(const lock::LockStatus& status)
{
  std::string state = status.kind.mode == lock::LockKind::Mode::limit
                        ? fmt::format("held by {} of {} (--limit {})", status.slots.size(),
                                      status.kind.limit, status.kind.limit)
                        : fmt::format("held shared by {}", status.slots.size());
  std::string out = fmt::format("{:<15}{}\n", "state:", state);
  for (std::size_t i = 0; i < status.slots.size(); ++i) {
    const lock::SlotHolder& slot = status.slots[i];
    out += fmt::format("{:<15}{} pid {}, held {}, lease left {}, fencing token {}: {}\n",
                       i == 0 ? "holders:" : "", holder_name(slot.holder), slot.holder.pid,
                       format_duration(Millis(status.held_ms(slot.holder))),
                       format_duration(Millis(slot.ttl_ms)), slot.holder.fence,
                       util::printable(slot.holder.command));
  }
  out += fmt::format("{:<15}{}\n", "last fencing:", last_fence(status));
  out += fmt::format("{:<15}{}\n", "waiters:", status.waiters);
  return out;
}

std::string human_status(const lock::LockStatus& status)
{
  std::string out = fmt::format("{:<15}{}\n", "lock:", util::printable(status.name));
  if (!status.held && status.delay_ms > 0) {
    // --lock-delay: nobody holds it, but it cannot be taken yet
    out += fmt::format("{:<15}free after {} (lock-delay), in {}\n",
                       "state:", util::format_rfc3339(status.server_time_ms + status.delay_ms),
                       format_duration(Millis(status.delay_ms)));
    if (!status.holder.host.empty()) {
      out += fmt::format("{:<15}{} pid {}, ended without a release\n",
                         "last holder:", holder_name(status.holder), status.holder.pid);
    }
    out += fmt::format("{:<15}{}\n", "last fencing:", last_fence(status));
    out += fmt::format("{:<15}{}\n", "waiters:", status.waiters);
    return out + human_nodes(status);
  }
  if (!status.held) {
    out += fmt::format("{:<15}free\n", "state:");
    out += fmt::format("{:<15}{}\n", "last fencing:", last_fence(status));
    out += fmt::format("{:<15}{}\n", "waiters:", status.waiters);
    return out + human_nodes(status);
  }
  if (!status.slots.empty()) {
    return out + human_slots(status);
  }
  const lock::HolderInfo& holder = status.holder;
  if (status.command_ended) {
    out += fmt::format("{:<15}held until {} (--min-hold), command ended\n",
                       "state:", util::format_rfc3339(status.server_time_ms + status.ttl_ms));
  } else {
    out += fmt::format("{:<15}held\n", "state:");
  }
  out += fmt::format("{:<15}{} pid {}\n", "holder:", holder_name(holder), holder.pid);
  out += fmt::format("{:<15}{}\n", "command:", util::printable(holder.command));
  if (!holder.note.empty()) {
    out += fmt::format("{:<15}{}\n", "note:", util::printable(holder.note));
  }
  if (!holder.value.empty()) {
    out += fmt::format("{:<15}{}\n", "value:", util::printable(holder.value));
  }
  if (holder.acquired_ms > 0) {
    out +=
      fmt::format("{:<15}{} (held {})\n", "acquired at:", util::format_rfc3339(holder.acquired_ms),
                  format_duration(Millis(status.held_ms())));
  }
  out += fmt::format("{:<15}{}\n", "lease left:",
                     status.ttl_ms >= 0 ? format_duration(Millis(status.ttl_ms)) : "no expiry");
  out += fmt::format("{:<15}{}\n", "fencing token:", holder.fence);
  out += fmt::format("{:<15}{}\n", "waiters:", status.waiters);
  return out + human_nodes(status);
}

} // namespace

std::string aligned_columns(const std::vector<std::vector<std::string>>& rows)
{
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += i + 1 < row.size() ? fmt::format("{:<{}}  ", row[i], widths[i]) : row[i];
    }
    line.erase(line.find_last_not_of(' ') + 1); // an empty last cell: no blanks at the end
    out += line + "\n";
  }
  return out;
}

void print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

std::string holder_name(const lock::HolderInfo& holder)
{
  return holder.user.empty() && holder.host.empty()
           ? "?"
           : util::printable(holder.user) + "@" + util::printable(holder.host);
}

int status(Context& context, const StatusOptions& options)
{
  lock::LockStatus status =
    context.store.status(options.key, util::deadline_after(context.request_timeout));
  if (options.json) {
    util::JsonObject document;
    document.add("version", std::int64_t{1});
    status.add_json_fields(document);
    print(document.str() + "\n");
  } else {
    print(human_status(status));
  }
  return status.held ? 0 : static_cast<int>(ExitCode::not_held);
}

} // namespace dlock::commands
