#include "util/json.hpp"

#include "util/text.hpp"

#include <fmt/format.h>

#include <ctime>

namespace dlock::util {

std::string json_quote(std::string_view text)
{
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    char c = text[i];
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80) {
      // Copy valid UTF-8 as is; a stray byte becomes U+FFFD so the document stays valid.
      std::size_t length = utf8_char_length(text.substr(i));
      out += length == 0 ? "\\ufffd" : std::string(text.substr(i, length));
      i += length == 0 ? 1 : length;
      continue;
    }
    ++i;
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
      if (byte < 0x20 || byte == 0x7f) {
        out += fmt::format("\\u{:04x}", byte);
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

JsonObject& JsonObject::add(std::string_view name, const JsonObject& value)
{
  key(name);
  m_body += value.str();
  return *this;
}

namespace {

// "[a,b,...]", each element as render writes it.
template<typename T, typename Render>
std::string json_array(const std::vector<T>& values, Render render)
{
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    out += (i > 0 ? "," : "") + render(values[i]);
  }
  return out + "]";
}

} // namespace

JsonObject& JsonObject::add(std::string_view name, const std::vector<JsonObject>& values)
{
  key(name);
  m_body += json_array(values, [](const JsonObject& value) { return value.str(); });
  return *this;
}

JsonObject& JsonObject::add(std::string_view name, const std::vector<std::string>& values)
{
  key(name);
  m_body += json_array(values, [](const std::string& value) { return json_quote(value); });
  return *this;
}

JsonObject& JsonObject::add(std::string_view name, const std::vector<std::int64_t>& values)
{
  key(name);
  m_body += json_array(values, [](std::int64_t value) { return std::to_string(value); });
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
