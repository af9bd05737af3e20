#include "util/syslog.hpp"

#include <syslog.h>

namespace dlock::util {

namespace {

bool needs_quotes(std::string_view value)
{
  if (value.empty()) {
    return true;
  }
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '"' || c == '=' || c == '\\' || c == '\n' || c == '\r') {
      return true;
    }
  }
  return false;
}

int priority(EventLevel level)
{
  switch (level) {
  case EventLevel::warning:
    return LOG_WARNING;
  case EventLevel::notice:
    return LOG_NOTICE;
  case EventLevel::info:
    break;
  }
  return LOG_INFO;
}

bool g_enabled = false;

} // namespace

void set_syslog(bool enabled) { g_enabled = enabled; }

std::string event_line(std::string_view event, const std::vector<EventField>& fields)
{
  std::string line = "event=";
  line += event;
  for (const EventField& field : fields) {
    line += ' ';
    line += field.name;
    line += '=';
    if (!needs_quotes(field.value)) {
      line += field.value;
      continue;
    }
    line += '"';
    for (char c : field.value) {
      if (c == '"' || c == '\\') {
        line += '\\';
        line += c;
      } else if (c == '\n' || c == '\r') {
        line += ' '; // one event, one line
      } else {
        line += c;
      }
    }
    line += '"';
  }
  return line;
}

void syslog_event(EventLevel level, std::string_view event, const std::vector<EventField>& fields)
{
  if (!g_enabled) {
    return;
  }
  static const bool opened = [] {
    ::openlog("dlock", LOG_PID, LOG_USER);
    return true;
  }();
  (void)opened;
  std::string line = event_line(event, fields);
  ::syslog(priority(level), "%s", line.c_str());
}

} // namespace dlock::util
