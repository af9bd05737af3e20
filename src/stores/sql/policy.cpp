#include "stores/sql/policy.hpp"

#include "util/url.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace dlock::sql {

namespace {

constexpr char separator = '\x1f';

std::string escaped(std::string_view text)
{
  std::string out;
  for (char c : text) {
    if (c == '%') {
      out += "%25";
    } else if (c == separator) {
      out += "%1F";
    } else {
      out += c;
    }
  }
  return out;
}

std::int64_t number_or_zero(std::string_view text)
{
  return lock::parse_record_number(text).value_or(0);
}

} // namespace

std::string encode_holder(const lock::HolderInfo& holder)
{
  std::string out;
  for (const std::string& field : {holder.user, holder.host, std::to_string(holder.pid),
                                   holder.command, std::to_string(holder.acquired_ms),
                                   std::to_string(holder.ttl_ms), holder.note, holder.value}) {
    if (!out.empty()) {
      out += separator;
    }
    out += escaped(field);
  }
  return out;
}

std::optional<lock::HolderInfo> decode_holder(std::string_view text)
{
  if (text.empty() || text.size() > lock::max_holder_record_bytes) {
    return std::nullopt;
  }
  std::array<std::string, 8> parts; // the last, value, is absent from records before elect
  std::size_t count = 0;
  for (std::string_view rest = text;; ++count) {
    if (count == parts.size()) {
      return std::nullopt;
    }
    std::size_t end = rest.find(separator);
    auto decoded = util::percent_decode(rest.substr(0, end), util::HexDigits::upper_case);
    if (!decoded) {
      return std::nullopt;
    }
    parts[count] = std::move(*decoded);
    if (end == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(end + 1);
  }
  if (count + 1 < parts.size() - 1) {
    return std::nullopt;
  }
  lock::HolderField fields[] = {
    {"user", parts[0]},        {"host", parts[1]},   {"pid", parts[2]},  {"command", parts[3]},
    {"acquired_ms", parts[4]}, {"ttl_ms", parts[5]}, {"value", parts[7]}};
  std::optional<lock::HolderInfo> holder = lock::parse_holder_record(fields);
  if (!holder || parts[6].size() > lock::max_note_bytes) {
    return std::nullopt;
  }
  holder->note = parts[6];
  return holder;
}

std::string policy_columns(const std::function<std::string(const char*, std::size_t)>& cut)
{
  const std::size_t record = lock::max_holder_record_bytes + 1;
  return fmt::format("{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}", cut("token_fp", 65),
                     cut("session_id", 21), cut("holder", record), cut("hold_until", 21),
                     cut("released", 6), cut("delay_ms", 21), cut("ended_at", 21),
                     cut("replace_by", record), cut("newest_waiter", 65), cut("newest", record),
                     cut("newest_until", 21));
}

PolicyRow parse_policy_row(const PolicyText& text)
{
  PolicyRow row;
  if (text.token_fp.size() <= 64) {
    row.token_fp = text.token_fp;
  }
  row.session = number_or_zero(text.session);
  row.holder = decode_holder(text.holder);
  row.hold_until = number_or_zero(text.hold_until);
  row.released = text.released == "t" || text.released == "true" || text.released == "1";
  row.delay_ms = number_or_zero(text.delay_ms);
  row.ended_at = number_or_zero(text.ended_at);
  row.replace_by = decode_holder(text.replace_by);
  if (text.newest_waiter.size() <= 64) {
    row.newest_waiter = text.newest_waiter;
  }
  row.newest = decode_holder(text.newest);
  row.newest_until = number_or_zero(text.newest_until);
  return row;
}

Closed closed_to(const PolicyRow& row, const std::string& token_fp, std::int64_t now)
{
  Closed closed;
  if (row.token_fp.empty() || row.token_fp == token_fp) {
    return closed; // nobody's, or this token's own (a retry)
  }
  std::int64_t until = row.replace_by ? 0 : row.hold_until;
  bool delayed = !row.released && row.delay_ms > 0 && !row.replace_by;
  std::int64_t delay_end = 0;
  if (delayed) {
    std::int64_t ended = row.ended_at > 0 ? row.ended_at : now;
    closed.stamp = row.ended_at <= 0;
    delay_end = ended > INT64_MAX - row.delay_ms ? INT64_MAX : ended + row.delay_ms;
  }
  std::int64_t end = std::max(until, delay_end);
  if (end <= now) {
    return closed;
  }
  closed.why = until >= delay_end ? Closed::Why::min_hold : Closed::Why::lock_delay;
  closed.left = util::Millis(end - now);
  return closed;
}

Idle idle_state(const PolicyRow& row, std::int64_t now)
{
  Idle idle;
  if (row.token_fp.empty()) {
    return idle;
  }
  if (!row.replace_by && row.hold_until > now) {
    idle.held_for = util::Millis(row.hold_until - now);
    return idle;
  }
  if (!row.released && !row.replace_by && row.delay_ms > 0) {
    std::int64_t ended = row.ended_at > 0 ? row.ended_at : now;
    if (ended <= INT64_MAX - row.delay_ms && ended + row.delay_ms > now) {
      idle.delay_for = util::Millis(ended + row.delay_ms - now);
    }
  }
  return idle;
}

std::optional<lock::HolderInfo> superseded(const PolicyRow& row, const std::string& waiter_id,
                                           std::int64_t now)
{
  if (row.newest_waiter.empty() || row.newest_waiter == waiter_id || row.newest_until <= now) {
    return std::nullopt;
  }
  return row.newest.value_or(lock::HolderInfo{});
}

} // namespace dlock::sql
