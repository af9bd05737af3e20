#include "util/json.hpp"

#include <fmt/format.h>

#include <ctime>

namespace dlock::util {

std::string json_quote(std::string_view text)
{
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
      } else {
        out.push_back(c);
      }
    }
  }
  out.push_back('"');
  return out;
}

void JsonObject::key(std::string_view name)
{
  if (!m_body.empty()) {
    m_body.push_back(',');
  }
  m_body += json_quote(name);
  m_body.push_back(':');
}

JsonObject& JsonObject::add(std::string_view name, std::string_view value)
{
  key(name);
  m_body += json_quote(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view name, std::int64_t value)
{
  key(name);
  m_body += std::to_string(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view name, bool value)
{
  key(name);
  m_body += value ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::add_null(std::string_view name)
{
  key(name);
  m_body += "null";
  return *this;
}

JsonObject& JsonObject::add_raw(std::string_view name, std::string_view json)
{
  key(name);
  m_body += json;
  return *this;
}

std::string format_rfc3339(std::int64_t unix_ms)
{
  std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900,
                     utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                     unix_ms % 1000);
}

} // namespace dlock::util
