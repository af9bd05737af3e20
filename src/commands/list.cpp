#include "commands/list.hpp"

#include "commands/metrics_file.hpp"
#include "commands/status.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

namespace dlock::commands {

namespace {

using util::format_duration;
using util::Millis;

std::string human_table(const std::vector<lock::LockStatus>& statuses)
{
  std::vector<std::vector<std::string>> rows;
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
  return aligned_columns(rows);
}

// One family of list's Prometheus output: its name, help, and the value of one lock's sample
// (nothing: the lock has none, the value being unknown).
struct LockFamily {
  const char* name;
  const char* help;
  std::optional<std::string> (*value)(const lock::LockStatus& status);
};

std::string seconds(std::int64_t ms)
{
  return fmt::format("{:.3f}", static_cast<double>(ms) / 1000);
}

const LockFamily lock_families[] = {
  {"dlock_lock_held",
   "1 for a held lock (free locks are not listed); label kind: exclusive, "
   "shared or limit.",
   [](const lock::LockStatus&) -> std::optional<std::string> { return "1"; }},
  {"dlock_lock_acquired_timestamp_seconds",
   "When its holder (the longest-held of a --shared or --limit lock) took it, by the store's "
   "clock.",
   [](const lock::LockStatus& status) -> std::optional<std::string> {
     if (status.holder.acquired_ms <= 0) {
       return std::nullopt;
     }
     return seconds(status.holder.acquired_ms);
   }},
  {"dlock_lock_held_seconds", "How long its holder has held it, by the store's clock.",
   [](const lock::LockStatus& status) -> std::optional<std::string> {
     if (status.holder.acquired_ms <= 0) {
       return std::nullopt;
     }
     return seconds(status.held_ms());
   }},
  {"dlock_lock_lease_remaining_seconds",
   "What is left of its lease unless renewed (none for a lock without a lease: a database "
   "session's, a file's, a ZooKeeper session's).",
   [](const lock::LockStatus& status) -> std::optional<std::string> {
     if (status.ttl_ms < 0) {
       return std::nullopt;
     }
     return seconds(status.ttl_ms);
   }},
  {"dlock_lock_holders", "How many hold it (more than 1 for a --shared or --limit lock).",
   [](const lock::LockStatus& status) -> std::optional<std::string> {
     return std::to_string(std::max<std::size_t>(1, status.slots.size()));
   }},
  {"dlock_lock_limit", "The N of a --limit N lock (a semaphore).",
   [](const lock::LockStatus& status) -> std::optional<std::string> {
     if (status.kind.mode != lock::LockKind::Mode::limit) {
       return std::nullopt;
     }
     return std::to_string(status.kind.limit);
   }},
  {"dlock_lock_waiters", "How many wait for it.",
   [](const lock::LockStatus& status) -> std::optional<std::string> {
     return std::to_string(status.waiters);
   }},
  {"dlock_lock_fencing_token", "The last fencing token handed out on it (none when unknown).",
   [](const lock::LockStatus& status) -> std::optional<std::string> {
     if (!status.last_fence || *status.last_fence <= 0) {
       return std::nullopt;
     }
     return std::to_string(*status.last_fence);
   }},
  {"dlock_lock_command_ended",
   "1 when its holder's command has ended and it is kept only for its --min-hold.",
   [](const lock::LockStatus& status) -> std::optional<std::string> {
     return status.command_ended ? "1" : "0";
   }},
};

// "exclusive", "shared" or "limit" (its N is dlock_lock_limit's).
std::string kind_name(const lock::LockKind& kind)
{
  std::string code = kind.code();
  return code.substr(0, code.find(':'));
}

// The locks as Prometheus text, family by family (each family's samples together, as the
// format wants). Two names that escape alike (bytes that are not UTF-8) would make one series
// twice, which a scrape rejects: the second is left out, with a warning.
std::string prometheus_text(const std::vector<lock::LockStatus>& statuses)
{
  std::vector<const lock::LockStatus*> shown;
  std::vector<std::string> labels;
  std::set<std::string> seen;
  for (const auto& status : statuses) {
    std::string label = fmt::format("key=\"{}\"", PrometheusText::label_value(status.name));
    if (!seen.insert(label).second) {
      util::log_warning("lock '{}' is left out: its name is another's once made UTF-8",
                        util::printable(status.name));
      continue;
    }
    shown.push_back(&status);
    labels.push_back(std::move(label));
  }
  PrometheusText out;
  for (const LockFamily& family : lock_families) {
    out.family(family.name, "gauge", family.help);
    for (std::size_t i = 0; i < shown.size(); ++i) {
      std::optional<std::string> value = family.value(*shown[i]);
      if (!value) {
        continue;
      }
      std::string_view name = family.name;
      std::string label = name == "dlock_lock_held"
                            ? fmt::format("{},kind=\"{}\"", labels[i], kind_name(shown[i]->kind))
                            : labels[i];
      out.sample(PrometheusText::series(name, label), *value);
    }
  }
  return out.str();
}

} // namespace

int list(Context& context, const ListOptions& options)
{
  std::vector<lock::LockStatus> statuses =
    context.store.list(options.pattern, context.request_timeout);
  if (options.format == ListFormat::prometheus) {
    print(prometheus_text(statuses));
  } else if (options.format == ListFormat::json) {
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
