#include "lock/history.hpp"

#include "util/text.hpp"

#include <array>

namespace dlock::lock {

namespace {

constexpr std::array<std::pair<HistoryEvent::Kind, std::string_view>, 6> kind_names{{
  {HistoryEvent::Kind::acquired, "acquired"},
  {HistoryEvent::Kind::released, "released"},
  {HistoryEvent::Kind::lost, "lost"},
  {HistoryEvent::Kind::replaced, "replaced"},
  {HistoryEvent::Kind::skipped, "skipped"},
  {HistoryEvent::Kind::forced, "forced"},
}};

constexpr std::string_view version = "v1";

// Printable ASCII but '%', '=' and the blank stays as it is; every other byte is %XX.
void append_escaped(std::string& out, std::string_view text)
{
  constexpr std::string_view hex = "0123456789ABCDEF";
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte > 0x20 && byte < 0x7f && c != '%' && c != '=') {
      out += c;
    } else {
      out += '%';
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    }
  }
}

std::optional<int> hex_digit(char c)
{
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return std::nullopt;
}

// append_escaped's text back, or nothing if it is not such a text.
std::optional<std::string> unescaped(std::string_view text)
{
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) {
      return std::nullopt;
    }
    std::optional<int> high = hex_digit(text[i + 1]);
    std::optional<int> low = hex_digit(text[i + 2]);
    if (!high || !low) {
      return std::nullopt;
    }
    out += static_cast<char>(*high * 16 + *low);
    i += 2;
  }
  return out;
}

} // namespace

HistoryEvent HistoryEvent::now(Kind kind, const HolderInfo& holder)
{
  HistoryEvent event;
  event.kind = kind;
  event.at_ms = util::unix_ms();
  event.holder = holder;
  event.holder.command.clear(); // never the command line
  event.holder.acquired_ms = 0;
  event.holder.ttl_ms = 0;
  return event;
}

std::string_view event_name(HistoryEvent::Kind kind)
{
  for (const auto& [k, name] : kind_names) {
    if (k == kind) {
      return name;
    }
  }
  return "?";
}

std::string encode_event(const HistoryEvent& event)
{
  std::string out(version);
  auto text = [&out](std::string_view name, std::string_view value, std::size_t max) {
    if (value.empty()) {
      return;
    }
    out += ' ';
    out += name;
    out += '=';
    append_escaped(out, util::utf8_prefix(value, max));
  };
  auto number = [&out](std::string_view name, std::int64_t value) {
    if (value >= 0) {
      out += ' ';
      out += name;
      out += '=';
      out += std::to_string(value);
    }
  };
  text("event", event_name(event.kind), 16);
  number("at", event.at_ms);
  text("user", event.holder.user, max_holder_field_bytes);
  text("host", event.holder.host, max_holder_field_bytes);
  number("pid", event.holder.pid);
  number("fence", event.holder.fence);
  number("waited_ms", event.waited_ms);
  number("held_ms", event.held_ms);
  number("exit_status", event.exit_status);
  text("note", event.holder.note, max_note_bytes);
  text("detail", event.detail, max_event_detail_bytes);
  // Escaping may triple a field; what does not fit is cut at a field's end, never inside one.
  while (out.size() > max_event_bytes) {
    out.erase(out.rfind(' '));
  }
  return out;
}

std::optional<HistoryEvent> decode_event(std::string_view text)
{
  if (text.size() > max_event_bytes || !text.starts_with(version)
      || (text.size() > version.size() && text[version.size()] != ' ')) {
    return std::nullopt;
  }
  HistoryEvent event;
  bool kind_seen = false;
  std::string_view rest = text.substr(version.size());
  while (!rest.empty()) {
    rest.remove_prefix(1); // the blank
    std::size_t end = rest.find(' ');
    std::string_view field = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
    std::size_t equals = field.find('=');
    if (equals == std::string_view::npos || equals == 0) {
      return std::nullopt;
    }
    std::string_view name = field.substr(0, equals);
    std::optional<std::string> value = unescaped(field.substr(equals + 1));
    if (!value) {
      return std::nullopt;
    }
    auto number = [&value](std::int64_t& into) {
      std::optional<std::int64_t> parsed = parse_record_number(*value);
      into = parsed.value_or(-1);
      return parsed.has_value();
    };
    bool ok = true;
    if (name == "event") {
      for (const auto& [k, kind_name] : kind_names) {
        if (kind_name == *value) {
          event.kind = k;
          kind_seen = true;
        }
      }
      ok = kind_seen;
    } else if (name == "at") {
      ok = number(event.at_ms);
    } else if (name == "user") {
      event.holder.user = *value;
    } else if (name == "host") {
      event.holder.host = *value;
    } else if (name == "pid") {
      ok = number(event.holder.pid);
    } else if (name == "fence") {
      ok = number(event.holder.fence);
    } else if (name == "waited_ms") {
      ok = number(event.waited_ms);
    } else if (name == "held_ms") {
      ok = number(event.held_ms);
    } else if (name == "exit_status") {
      ok = number(event.exit_status);
    } else if (name == "note") {
      event.holder.note = *value;
    } else if (name == "detail") {
      event.detail = *value;
    } // a field of a later version is skipped
    if (!ok) {
      return std::nullopt;
    }
  }
  if (!kind_seen || !event.holder.plausible() || event.detail.size() > max_event_detail_bytes) {
    return std::nullopt;
  }
  return event;
}

} // namespace dlock::lock
