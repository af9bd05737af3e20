#pragma once

#include <string>
#include <string_view>
#include <vector>

// Structured event lines through syslog(3), so that journald (`journalctl -t dlock`) or a
// syslog daemon keeps a trace of what cron kept quiet.
namespace dlock::util {

// One "name=value" of an event line.
struct EventField {
  std::string_view name;
  std::string value;
};

// How much an event matters, as syslog's priorities.
enum class EventLevel { info, notice, warning };

// "event=NAME name=value ...": a value with blanks, quotes, '=' or nothing is written in
// double quotes, with '"' and '\' escaped, so that every line splits the same way.
std::string event_line(std::string_view event, const std::vector<EventField>& fields);

// Set once from --syslog / DLOCK_SYSLOG; like the verbosity, process-wide logging state.
void set_syslog(bool enabled);

// With --syslog: sends one event line to syslog(3), identified as "dlock" with the pid,
// facility user; else nothing.
void syslog_event(EventLevel level, std::string_view event, const std::vector<EventField>& fields);

} // namespace dlock::util
