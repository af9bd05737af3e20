#include "stores/zookeeper/nodes.hpp"

#include "lock/kind.hpp"
#include "util/random.hpp"
#include "util/text.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace dlock::zookeeper {

namespace {

constexpr std::string_view protected_mark = "_c_";
constexpr std::size_t uuid_length = 36;
constexpr std::size_t sequence_digits = 10;
// The longest text a side record names: a contender (55 characters), a waiter's id (16).
constexpr std::size_t max_side_text = 64;

std::string_view marker(Role role)
{
  switch (role) {
  case Role::exclusive:
    return "lock-";
  case Role::read:
    return "__READ__";
  case Role::write:
    return "__WRIT__";
  case Role::latch:
    return "latch-";
  }
  return "lock-";
}

// A value on one line of a record (a newline would start another field).
std::string one_line(std::string text)
{
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

bool escaped(unsigned char c) { return c <= ' ' || c >= 0x7f || c == '/' || c == '%'; }

} // namespace

std::string encode_name(std::string_view prefixed)
{
  if (prefixed == "." || prefixed == "..") {
    return prefixed == "." ? "%2E" : "%2E%2E";
  }
  std::string out;
  for (char c : prefixed) {
    auto byte = static_cast<unsigned char>(c);
    if (escaped(byte)) {
      out += fmt::format("%{:02X}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> decode_name(std::string_view name)
{
  auto stray = [](char c) { return c != '%' && escaped(static_cast<unsigned char>(c)); };
  if (std::any_of(name.begin(), name.end(), stray)) {
    return std::nullopt;
  }
  // Lower case is never made, so never read.
  std::optional<std::string> out = util::percent_decode(name, util::HexDigits::upper_case);
  if (!out || out->empty()) {
    return std::nullopt;
  }
  return out;
}

std::string random_uuid()
{
  std::string hex = util::random_token();         // 32 hex digits from the kernel's CSPRNG
  hex[12] = '4';                                  // version 4
  hex[16] = "89ab"[util::hex_value(hex[16]) & 3]; // RFC 4122 variant
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-"
         + hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

std::string contender_prefix(std::string_view uuid, Role role)
{
  return std::string(protected_mark) + std::string(uuid) + "-" + std::string(marker(role));
}

std::optional<Contender> parse_contender(std::string_view name)
{
  if (name.size() < sequence_digits) {
    return std::nullopt;
  }
  std::string_view digits = name.substr(name.size() - sequence_digits);
  std::string_view head = name.substr(0, name.size() - sequence_digits);
  Contender contender;
  auto [end, error] =
    std::from_chars(digits.data(), digits.data() + digits.size(), contender.sequence);
  if (error != std::errc{} || end != digits.data() + digits.size() || digits.front() == '-') {
    return std::nullopt;
  }
  bool known = false;
  for (Role role : {Role::exclusive, Role::read, Role::write, Role::latch}) {
    if (head.ends_with(marker(role))) {
      contender.role = role;
      known = true;
    }
  }
  if (!known) {
    return std::nullopt;
  }
  if (head.starts_with(protected_mark) && head.size() > protected_mark.size() + uuid_length
      && head[protected_mark.size() + uuid_length] == '-') {
    contender.uuid = std::string(head.substr(protected_mark.size(), uuid_length));
  }
  contender.name = std::string(name);
  return contender;
}

std::vector<Contender> sorted_contenders(const std::vector<std::string>& children)
{
  std::vector<Contender> queue;
  for (const std::string& child : children) {
    if (std::optional<Contender> contender = parse_contender(child)) {
      queue.push_back(std::move(*contender));
    }
  }
  std::sort(queue.begin(), queue.end(), [](const Contender& a, const Contender& b) {
    return a.sequence != b.sequence ? a.sequence < b.sequence : a.name < b.name;
  });
  std::vector<Contender> merged;
  for (std::size_t i = 0; i < queue.size(); ++i) {
    merged.push_back(std::move(queue[i]));
    Contender& last = merged.back();
    if (i + 1 < queue.size() && last.role == Role::exclusive && !last.uuid.empty()
        && queue[i + 1].role == Role::write && queue[i + 1].uuid == last.uuid
        && queue[i + 1].sequence == last.sequence + 1) {
      last.partner = std::move(queue[++i].name);
      if (i + 1 < queue.size() && queue[i + 1].role == Role::latch && queue[i + 1].uuid == last.uuid
          && queue[i + 1].sequence == last.sequence + 2) {
        last.latch = std::move(queue[++i].name);
      }
    }
  }
  return merged;
}

Verdict judge(const std::vector<Contender>& queue, std::size_t ours)
{
  if (queue.at(ours).role != Role::read) {
    return ours == 0 ? Verdict{true, 0} : Verdict{false, ours - 1};
  }
  for (std::size_t i = 0; i < ours; ++i) {
    if (queue[i].role != Role::read) {
      return Verdict{false, i};
    }
  }
  return Verdict{true, 0};
}

std::vector<std::size_t> holding(const std::vector<Contender>& queue)
{
  std::vector<std::size_t> holders;
  for (std::size_t i = 0; i < queue.size(); ++i) {
    if (judge(queue, i).holds) {
      holders.push_back(i);
    } else {
      break;
    }
  }
  return holders;
}

std::string lease_prefix(std::string_view uuid)
{
  return std::string(protected_mark) + std::string(uuid) + "-lease-";
}

std::vector<std::string> sorted_leases(const std::vector<std::string>& children)
{
  std::vector<std::pair<std::int64_t, std::string>> leases;
  for (const std::string& child : children) {
    std::size_t at = child.rfind("lease-");
    std::string_view digits = std::string_view(child).substr(at == std::string::npos ? 0 : at + 6);
    std::int64_t sequence = 0;
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), sequence);
    if (at == std::string::npos || (at != 0 && !child.starts_with(protected_mark))
        || digits.size() != sequence_digits || error != std::errc{}
        || end != digits.data() + digits.size() || digits.front() == '-') {
      continue; // not a lease: junk is not counted
    }
    leases.emplace_back(sequence, child);
  }
  std::sort(leases.begin(), leases.end());
  std::vector<std::string> names;
  for (auto& [sequence, name] : leases) {
    names.push_back(std::move(name));
  }
  return names;
}

std::string lease_record(const lock::HolderInfo& holder, std::string_view fingerprint, int limit)
{
  return holder_record(holder, fingerprint) + "kind=" + lock::LockKind::semaphore(limit).code()
         + "\n";
}

int lease_limit(std::string_view data)
{
  if (!data.starts_with("dlock=1\n") || data.size() > lock::max_holder_record_bytes) {
    return 0;
  }
  std::size_t at = data.find("\nkind=");
  if (at == std::string_view::npos) {
    return 0;
  }
  std::string_view code = data.substr(at + 6);
  code = code.substr(0, code.find('\n'));
  std::optional<lock::LockKind> kind = lock::LockKind::from_code(code);
  return kind && kind->mode == lock::LockKind::Mode::limit ? kind->limit : 0;
}

std::string party_prefix(std::string_view uuid)
{
  return std::string(protected_mark) + std::string(uuid) + "-party-";
}

std::vector<std::string> sorted_parties(const std::vector<std::string>& children)
{
  auto is_uuid = [](std::string_view name) {
    if (name.size() != uuid_length) {
      return false;
    }
    for (std::size_t i = 0; i < name.size(); ++i) {
      bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash ? name[i] != '-' : std::isxdigit(static_cast<unsigned char>(name[i])) == 0) {
        return false;
      }
    }
    return true;
  };
  std::vector<std::pair<std::int64_t, std::string>> parties;
  for (const std::string& child : children) {
    if (is_uuid(child)) {
      parties.emplace_back(-1, child); // Curator's: no sequence, before dlock's
      continue;
    }
    std::string_view name = child;
    constexpr std::string_view mark = "-party-";
    if (!name.starts_with(protected_mark)
        || name.size() != protected_mark.size() + uuid_length + mark.size() + sequence_digits
        || !is_uuid(name.substr(protected_mark.size(), uuid_length))
        || name.substr(protected_mark.size() + uuid_length, mark.size()) != mark) {
      continue;
    }
    std::string_view digits = name.substr(name.size() - sequence_digits);
    std::int64_t sequence = 0;
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), sequence);
    if (error != std::errc{} || end != digits.data() + digits.size() || digits.front() == '-') {
      continue;
    }
    parties.emplace_back(sequence, child);
  }
  std::sort(parties.begin(), parties.end());
  std::vector<std::string> names;
  for (auto& [sequence, name] : parties) {
    names.push_back(std::move(name));
  }
  return names;
}

std::optional<std::int64_t> record_number(std::string_view data, std::string_view key)
{
  if (!data.starts_with("dlock=1\n") || data.size() > lock::max_holder_record_bytes) {
    return std::nullopt;
  }
  std::string field = "\n" + std::string(key) + "=";
  std::size_t at = data.find(field);
  if (at == std::string_view::npos) {
    return std::nullopt;
  }
  std::string_view value = data.substr(at + field.size());
  return lock::parse_record_number(value.substr(0, value.find('\n')));
}

std::string latch_record(const LatchRecord& record)
{
  return fmt::format("dlock=1\ncount={}\nexpires_at={}\n", record.count, record.expires_at);
}

std::optional<LatchRecord> parse_latch_record(std::string_view data)
{
  std::optional<std::int64_t> count = record_number(data, "count");
  std::optional<std::int64_t> expires_at = record_number(data, "expires_at");
  if (!count || !expires_at) {
    return std::nullopt;
  }
  return LatchRecord{*count, *expires_at};
}

std::string holder_record(const lock::HolderInfo& holder, std::string_view fingerprint)
{
  std::string record = fmt::format("dlock=1\nuser={}\nhost={}\npid={}\ntoken={}\nttl_ms={}\n"
                                   "command={}\n",
                                   one_line(holder.user), one_line(holder.host), holder.pid,
                                   fingerprint, holder.ttl_ms, one_line(holder.command));
  if (!holder.note.empty()) {
    record += fmt::format("note={}\n", one_line(holder.note));
  }
  if (!holder.value.empty()) {
    record += fmt::format("value={}\n", one_line(holder.value));
  }
  return record;
}

std::string lock_node_data(const lock::HolderInfo& holder, const std::string& record)
{
  return holder.value.empty() ? record : holder.value;
}

std::optional<std::string> proclamation(std::string_view data)
{
  if (data.empty() || data.size() > lock::max_holder_field_bytes) {
    return std::nullopt;
  }
  for (std::string_view rest = data; !rest.empty();) {
    std::size_t length = util::utf8_char_length(rest);
    auto byte = static_cast<unsigned char>(rest.front());
    if (length == 0 || byte < ' ' || byte == 0x7f) {
      return std::nullopt;
    }
    rest.remove_prefix(length);
  }
  return std::string(data);
}

std::string side_record(const SideRecord& record)
{
  std::string text = holder_record(record.holder, record.token);
  if (record.holder.fence != 0) {
    text += fmt::format("fence={}\n", record.holder.fence);
  }
  for (auto [name, value] :
       {std::pair{"node", &record.node}, std::pair{"waiter", &record.waiter}}) {
    if (!value->empty()) {
      text += fmt::format("{}={}\n", name, one_line(*value));
    }
  }
  for (auto [name, value] :
       {std::pair{"min_hold_ms", record.min_hold_ms},
        std::pair{"lock_delay_ms", record.lock_delay_ms}, std::pair{"ended_at", record.ended_at}}) {
    if (value != 0) {
      text += fmt::format("{}={}\n", name, value);
    }
  }
  if (record.released) {
    text += "released=1\n";
  }
  return text;
}

std::optional<SideRecord> parse_side_record(std::string_view data)
{
  if (!data.starts_with("dlock=1\n") || data.size() > lock::max_holder_record_bytes) {
    return std::nullopt;
  }
  SideRecord record;
  std::vector<lock::HolderField> fields;
  for (std::string_view rest = data; !rest.empty();) {
    std::string_view line = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(rest.size(), line.size() + 1));
    std::size_t equals = line.find('=');
    if (equals == std::string_view::npos) {
      return std::nullopt;
    }
    std::string_view name = line.substr(0, equals);
    std::string_view value = line.substr(equals + 1);
    std::int64_t* number = name == "min_hold_ms"     ? &record.min_hold_ms
                           : name == "lock_delay_ms" ? &record.lock_delay_ms
                           : name == "ended_at"      ? &record.ended_at
                                                     : nullptr;
    std::string* text = name == "node" ? &record.node : name == "waiter" ? &record.waiter : nullptr;
    if (number != nullptr) {
      std::optional<std::int64_t> parsed = lock::parse_record_number(value);
      if (!parsed || (number != &record.ended_at && *parsed > max_policy_ms)) {
        return std::nullopt;
      }
      *number = *parsed;
    } else if (text != nullptr) {
      if (value.empty() || value.size() > max_side_text) {
        return std::nullopt;
      }
      *text = value;
    } else if (name == "released") {
      if (value != "1") {
        return std::nullopt;
      }
      record.released = true;
    } else if (name == "token") {
      if (value.size() != 16 || !std::all_of(value.begin(), value.end(), [](char c) {
            return std::isxdigit(static_cast<unsigned char>(c)) != 0;
          })) {
        return std::nullopt;
      }
      record.token = value;
    } else {
      fields.push_back({name, value});
    }
  }
  std::optional<lock::HolderInfo> holder = lock::parse_holder_record(fields);
  if (!holder || record.token.empty()) {
    return std::nullopt;
  }
  record.holder = *holder;
  if (!record.holder.value.empty() && !proclamation(record.holder.value)) {
    record.holder.value.clear();
  }
  return record;
}

lock::HolderInfo parse_holder_record(std::string_view data, std::string* fingerprint)
{
  std::vector<lock::HolderField> fields;
  std::string_view token;
  bool dlocks = data.starts_with("dlock=1\n") && data.size() <= lock::max_holder_record_bytes;
  for (std::string_view rest = data; dlocks && !rest.empty();) {
    std::string_view line = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(rest.size(), line.size() + 1));
    std::size_t equals = line.find('=');
    if (equals == std::string_view::npos) {
      continue;
    }
    fields.push_back({line.substr(0, equals), line.substr(equals + 1)});
    if (fields.back().name == "token") {
      token = fields.back().value;
    }
  }
  std::optional<lock::HolderInfo> holder;
  if (dlocks) {
    holder = lock::parse_holder_record(fields);
  }
  if (!holder) {
    std::string shown;
    for (char c : data.substr(0, 64)) {
      shown += static_cast<unsigned char>(c) < ' ' ? '?' : c;
    }
    lock::HolderInfo other = lock::HolderInfo::not_dlock();
    if (std::optional<std::string> value = proclamation(data)) {
      other.value = std::move(*value); // a Curator leader's id (its mutex's: the address)
    } else if (!shown.empty()) {
      other.command = "(not a dlock holder: " + shown + ")";
    }
    return other;
  }
  if (fingerprint != nullptr) {
    *fingerprint = token;
  }
  if (!holder->value.empty() && !proclamation(holder->value)) {
    holder->value.clear();
  }
  return *holder;
}

std::string history_event_prefix(std::int64_t unix_ms)
{
  return fmt::format("e-{:016}-", std::max<std::int64_t>(0, unix_ms));
}

std::vector<HistoryNode> sorted_history(const std::vector<std::string>& children)
{
  constexpr std::size_t ms_digits = 16;
  constexpr std::size_t length = 2 + ms_digits + 1 + sequence_digits;
  auto digits = [](std::string_view text) {
    return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
  };
  std::vector<HistoryNode> nodes;
  for (const std::string& child : children) {
    std::string_view name = child;
    if (name.size() != length || !name.starts_with("e-") || name[2 + ms_digits] != '-') {
      continue;
    }
    std::string_view ms = name.substr(2, ms_digits);
    std::string_view sequence = name.substr(3 + ms_digits);
    if (!digits(ms) || !digits(sequence)) {
      continue;
    }
    HistoryNode node{.name = child};
    std::from_chars(ms.data(), ms.data() + ms.size(), node.at_ms);
    std::from_chars(sequence.data(), sequence.data() + sequence.size(), node.sequence);
    nodes.push_back(std::move(node));
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const HistoryNode& a, const HistoryNode& b) { return a.sequence < b.sequence; });
  return nodes;
}

} // namespace dlock::zookeeper
