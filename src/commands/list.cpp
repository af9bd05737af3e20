#include "commands/list.hpp"

#include "commands/status.hpp"
#include "util/json.hpp"
#include "util/text.hpp"

#include <fmt/format.h>

#include <array>

namespace dlock::commands {

namespace {

using util::format_duration;
using util::Millis;

std::string human_table(const std::vector<lock::LockStatus>& statuses)
{
  std::vector<std::array<std::string, 9>> rows;
  rows.push_back({"KEY", "HOLDER", "PID", "HELD", "TTL", "FENCE", "WAITERS", "COMMAND", "NOTE"});
  for (const auto& status : statuses) {
    std::string holder = holder_name(status.holder);
    if (status.slots.size() > 1) {
      holder += fmt::format(" +{}", status.slots.size() - 1); // --shared, --limit: the others
    }
    rows.push_back({util::printable(status.name), holder, std::to_string(status.holder.pid),
                    format_duration(Millis(status.held_ms())),
                    status.ttl_ms >= 0 ? format_duration(Millis(status.ttl_ms)) : "-",
                    std::to_string(status.holder.fence), std::to_string(status.waiters),
                    status.command_ended ? util::printable(status.holder.command) + " (ended)"
                                         : util::printable(status.holder.command),
                    util::printable(status.holder.note)});
  }
  std::array<std::size_t, 9> widths{};
  for (const auto& row : rows) {
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
    line.erase(line.find_last_not_of(' ') + 1); // no note: no blanks at the end
    out += line + "\n";
  }
  return out;
}

} // namespace

int list(Context& context, const ListOptions& options)
{
  std::vector<lock::LockStatus> statuses =
    context.store.list(options.pattern, context.request_timeout);
  if (options.json) {
    std::vector<util::JsonObject> locks(statuses.size());
    for (std::size_t i = 0; i < statuses.size(); ++i) {
      statuses[i].add_json_fields(locks[i]);
    }
    print(util::JsonObject().add("version", std::int64_t{1}).add("locks", locks).str() + "\n");
  } else if (!statuses.empty()) {
    print(human_table(statuses));
  }
  return 0;
}

} // namespace dlock::commands
