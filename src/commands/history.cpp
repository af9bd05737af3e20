#include "commands/history.hpp"

#include "commands/status.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

#include <fmt/format.h>

namespace dlock::commands {

namespace {

using lock::HistoryEvent;

std::string or_dash(std::int64_t value) { return value >= 0 ? std::to_string(value) : "-"; }

std::string duration_or_dash(std::int64_t ms)
{
  return ms >= 0 ? util::format_duration(util::Millis(ms)) : "-";
}

// What the event's detail says, with the note after it.
std::string detail_and_note(const HistoryEvent& event)
{
  std::string text = util::printable(event.detail);
  if (!event.holder.note.empty()) {
    text += (text.empty() ? "" : "; ") + ("note: " + util::printable(event.holder.note));
  }
  return text;
}

std::string human_table(const std::vector<HistoryEvent>& events)
{
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"TIME", "EVENT", "HOLDER", "PID", "FENCE", "WAITED", "HELD", "EXIT", "DETAIL"});
  for (const HistoryEvent& event : events) {
    rows.push_back({util::format_rfc3339(event.at_ms), std::string(lock::event_name(event.kind)),
                    holder_name(event.holder), std::to_string(event.holder.pid),
                    event.holder.fence > 0 ? std::to_string(event.holder.fence) : "-",
                    duration_or_dash(event.waited_ms), duration_or_dash(event.held_ms),
                    or_dash(event.exit_status), detail_and_note(event)});
  }
  return aligned_columns(rows);
}

util::JsonObject json_event(const HistoryEvent& event)
{
  util::JsonObject object;
  object.add("event", std::string(lock::event_name(event.kind)))
    .add("at", util::format_rfc3339(event.at_ms))
    .add("at_ms", event.at_ms)
    .add("user", event.holder.user)
    .add("host", event.holder.host)
    .add("pid", event.holder.pid)
    .add("fencing_token", event.holder.fence);
  auto optional_number = [&object](const char* name, std::int64_t value) {
    if (value >= 0) {
      object.add(name, value);
    } else {
      object.add_null(name);
    }
  };
  optional_number("waited_ms", event.waited_ms);
  optional_number("held_ms", event.held_ms);
  optional_number("exit_status", event.exit_status);
  object.add("note", event.holder.note).add("detail", event.detail);
  return object;
}

} // namespace

int history(Context& context, const HistoryOptions& options)
{
  lock::History& history = lock::require_history(context.store);
  std::vector<std::string> texts =
    history.events(options.key, options.limit, util::deadline_after(context.request_timeout));
  std::vector<HistoryEvent> events;
  std::size_t foreign = 0;
  for (const std::string& text : texts) {
    if (std::optional<HistoryEvent> event = lock::decode_event(text)) {
      events.push_back(std::move(*event));
    } else {
      ++foreign;
    }
    if (events.size() == options.limit) {
      break;
    }
  }
  if (foreign > 0) {
    util::log_verbose("{} entries of lock '{}''s history are not dlock's; left out", foreign,
                      options.key.str());
  }
  if (options.json) {
    std::vector<util::JsonObject> list;
    list.reserve(events.size());
    for (const HistoryEvent& event : events) {
      list.push_back(json_event(event));
    }
    print(util::JsonObject()
            .add("version", std::int64_t{1})
            .add("lock", options.key.str())
            .add("events", list)
            .str()
          + "\n");
  } else if (!events.empty()) {
    print(human_table(events));
  }
  return 0;
}

void record_event(lock::Store& store, const std::vector<lock::LockName>& keys,
                  const lock::HistoryEvent& event, std::optional<util::TimePoint> deadline)
{
  lock::History* history = store.history();
  if (history == nullptr || keys.empty()) {
    return;
  }
  const std::string text = lock::encode_event(event);
  for (const lock::LockName& key : keys) {
    history->start_record(key, text);
  }
  if (!deadline) {
    return;
  }
  try {
    for (std::size_t i = 0; i < keys.size(); ++i) { // one answer per key
      lock::await_outcome(store, lock::Outcome::Op::record, *deadline);
    }
  } catch (const Error& error) {
    util::log_verbose("could not add to lock '{}''s history: {}", lock::join_names(keys),
                      error.what());
  }
}

} // namespace dlock::commands
