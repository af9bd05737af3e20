#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::util {

// A JSON string literal for text, with quotes and escapes (control characters as \uXXXX).
std::string json_quote(std::string_view text);

// Builds one JSON object field by field, in insertion order (stable output for scripts).
class JsonObject {
public:
  JsonObject& add(std::string_view name, std::string_view value);
  JsonObject& add(std::string_view name, const char* value)
  {
    return add(name, std::string_view(value));
  }
  JsonObject& add(std::string_view name, std::int64_t value);
  JsonObject& add(std::string_view name, bool value);
  JsonObject& add_null(std::string_view name);
  // Nests an object, or an array of objects.
  JsonObject& add(std::string_view name, const JsonObject& value);
  JsonObject& add(std::string_view name, const std::vector<JsonObject>& values);
  // An array of strings, or of integers.
  JsonObject& add(std::string_view name, const std::vector<std::string>& values);
  JsonObject& add(std::string_view name, const std::vector<std::int64_t>& values);
  std::string str() const { return "{" + m_body + "}"; }

private:
  void key(std::string_view name);
  std::string m_body;
};

// Unix milliseconds as RFC 3339 UTC with milliseconds: "2026-11-22T15:04:05.123Z".
std::string format_rfc3339(std::int64_t unix_ms);

} // namespace dlock::util
