#include "stores/etcd/api.hpp"

#include "util/text.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace dlock::etcd {

namespace {

constexpr std::string_view alphabet =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The end of a prefix range: the prefix with its last byte below 0xff incremented.
std::string prefix_end(std::string prefix)
{
  while (!prefix.empty()) {
    auto last = static_cast<unsigned char>(prefix.back());
    if (last < 0xff) {
      prefix.back() = static_cast<char>(last + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0'); // every key
}

// "host[:port]" of one endpoint, checked, with the default port added.
std::string endpoint(std::string_view text, std::string_view url)
{
  std::string_view host = text, port;
  if (text.starts_with('[')) {
    std::size_t close = text.find(']');
    if (close == std::string_view::npos) {
      throw Error(ExitCode::usage, "bad etcd URL '{}': unclosed '[' in '{}'",
                  util::url_redacted(url), text);
    }
    host = text.substr(0, close + 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') {
        throw Error(ExitCode::usage, "bad etcd URL '{}': '{}' is not host:port",
                    util::url_redacted(url), text);
      }
      port = text.substr(close + 2);
    }
  } else if (std::size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (port.empty()) {
      port = "x"; // "host:" is a mistake, not the default port
    }
  }
  if (host.empty() || host == "[]") {
    throw Error(ExitCode::usage, "bad etcd URL '{}': an endpoint has no host",
                util::url_redacted(url));
  }
  int number = 2379;
  if (!port.empty()) {
    auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (error != std::errc{} || end != port.data() + port.size() || number < 1 || number > 65535) {
      throw Error(ExitCode::usage, "bad etcd URL '{}': port '{}' is not a number from 1 to 65535",
                  util::url_redacted(url), port);
    }
  }
  return fmt::format("{}:{}", host, number);
}

// The message of an error answer: "message", else "error" as a string or, in a stream's
// error object, its "message"; "" when none is a string.
std::string error_message(const Json& body)
{
  std::string message = string_field(body, "message");
  if (message.empty()) {
    message = string_field(body, "error");
  }
  if (message.empty() && body.is_object() && body.contains("error")) {
    message = string_field(body["error"], "message");
  }
  return message;
}

} // namespace

std::string EtcdUrl::shown() const
{
  std::string text = tls ? "etcds://" : "etcd://";
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    text += (i == 0 ? "" : ",") + endpoints[i];
  }
  return text;
}

std::string EtcdUrl::base(std::size_t i) const
{
  return (tls ? "https://" : "http://") + endpoints.at(i);
}

bool is_etcd_url(std::string_view url)
{
  return url.starts_with("etcd://") || url.starts_with("etcds://");
}

EtcdUrl parse_url(std::string_view url)
{
  EtcdUrl parsed;
  parsed.tls = url.starts_with("etcds://");
  std::string_view rest = url.substr(util::after_scheme(url));
  if (auto userinfo = util::userinfo_of(url)) {
    rest.remove_prefix(userinfo->size() + 1);
    std::size_t colon = userinfo->find(':');
    auto user = util::percent_decode(userinfo->substr(0, colon));
    std::optional<std::string> password;
    if (colon != std::string_view::npos) {
      password = util::percent_decode(userinfo->substr(colon + 1));
    }
    if (!user || (colon != std::string_view::npos && !password)) {
      throw Error(ExitCode::usage,
                  "bad etcd URL '{}': a malformed %-escape in the user or password",
                  util::url_redacted(url));
    }
    if (!user->empty()) {
      parsed.user = *user;
    }
    if (password && !password->empty()) {
      parsed.password = *password;
    }
  }
  while (rest.ends_with('/')) {
    rest.remove_suffix(1);
  }
  if (rest.find_first_of("/?#") != std::string_view::npos) {
    throw Error(ExitCode::usage,
                "bad etcd URL '{}': etcd:// takes host:port[,host:port…] and no path or query "
                "(the keys' namespace is --prefix)",
                util::url_redacted(url));
  }
  if (rest.empty()) {
    throw Error(ExitCode::usage, "bad etcd URL '{}': no host", util::url_redacted(url));
  }
  while (true) {
    std::size_t comma = rest.find(',');
    parsed.endpoints.push_back(endpoint(rest.substr(0, comma), url));
    if (comma == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(comma + 1);
  }
  return parsed;
}

std::string base64_encode(std::string_view bytes)
{
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    auto n = (std::uint32_t(std::uint8_t(bytes[i])) << 16)
             | (std::uint32_t(std::uint8_t(bytes[i + 1])) << 8) | std::uint8_t(bytes[i + 2]);
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += alphabet[(n >> 6) & 63];
    out += alphabet[n & 63];
  }
  if (i < bytes.size()) {
    std::uint32_t n = std::uint32_t(std::uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) {
      n |= std::uint32_t(std::uint8_t(bytes[i + 1])) << 8;
    }
    out += alphabet[(n >> 18) & 63];
    out += alphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text)
{
  while (text.ends_with('=')) {
    text.remove_suffix(1);
  }
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    std::size_t value = alphabet.find(c);
    if (value == std::string_view::npos) {
      return std::nullopt;
    }
    bits = (bits << 6) | std::uint32_t(value);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xff);
    }
  }
  return out;
}

std::int64_t int_field(const Json& object, const char* name)
{
  if (!object.is_object()) {
    return 0;
  }
  auto found = object.find(name);
  if (found == object.end()) {
    return 0;
  }
  if (found->is_number_integer()) {
    return found->get<std::int64_t>();
  }
  if (found->is_string()) {
    const std::string& text = found->get_ref<const std::string&>();
    std::int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    return error == std::errc{} && end == text.data() + text.size() ? value : 0;
  }
  return 0;
}

std::string string_field(const Json& object, const char* name)
{
  if (!object.is_object()) {
    return "";
  }
  auto found = object.find(name);
  return found != object.end() && found->is_string() ? found->get<std::string>() : "";
}

bool watch_ended(const Json& result)
{
  return int_field(result, "compact_revision") > 0 || bool_field(result, "canceled");
}

bool bool_field(const Json& object, const char* name)
{
  if (!object.is_object()) {
    return false;
  }
  auto found = object.find(name);
  return found != object.end() && found->is_boolean() && found->get<bool>();
}

std::string lock_prefix(std::string_view prefix, std::string_view name)
{
  return std::string(prefix).append(name).append("/");
}

std::string lock_key(std::string_view lock_prefix, std::int64_t lease)
{
  return fmt::format("{}{:x}", lock_prefix, static_cast<std::uint64_t>(lease));
}

bool is_lock_key(std::string_view key, std::string_view lock_prefix)
{
  if (!key.starts_with(lock_prefix) || key.size() == lock_prefix.size()) {
    return false;
  }
  key.remove_prefix(lock_prefix.size());
  return key.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string read_key(std::string_view lock_prefix, std::int64_t lease)
{
  return fmt::format("{}read/{:x}", lock_prefix, static_cast<std::uint64_t>(lease));
}

KeyValue key_value(const Json& kv)
{
  KeyValue out;
  out.key = base64_decode(string_field(kv, "key")).value_or("");
  out.value = base64_decode(string_field(kv, "value")).value_or("");
  out.create_revision = int_field(kv, "create_revision");
  out.mod_revision = int_field(kv, "mod_revision");
  out.lease = int_field(kv, "lease");
  return out;
}

std::vector<KeyValue> key_values(const Json& range_response)
{
  std::vector<KeyValue> out;
  if (range_response.is_object() && range_response.contains("kvs")
      && range_response["kvs"].is_array()) {
    for (const Json& kv : range_response["kvs"]) {
      out.push_back(key_value(kv));
    }
  }
  return out;
}

Json grant_request(std::int64_t ttl_s) { return {{"TTL", std::to_string(ttl_s)}}; }

Json lease_request(std::int64_t lease) { return {{"ID", std::to_string(lease)}}; }

Json range_prefix_request(const std::string& prefix)
{
  return {{"key", base64_encode(prefix)},
          {"range_end", base64_encode(prefix_end(prefix))},
          {"sort_order", "ASCEND"},
          {"sort_target", "CREATE"}};
}

Json range_key_request(const std::string& key) { return {{"key", base64_encode(key)}}; }

Json acquire_txn(const std::string& key, const std::string& value, std::int64_t lease,
                 const std::string& lock_prefix, const std::vector<std::string>& side_keys,
                 const std::string& records_prefix)
{
  Json puts = records_prefix.empty() ? Json::array({put_op(key, value, lease)})
                                     : record_puts(key, value, lease, records_prefix);
  Json range = {{"request_range", range_prefix_request(lock_prefix)}};
  Json success = Json::array({puts[0], range});
  Json failure = Json::array({range_op(key), range});
  for (const std::string& side : side_keys) {
    success.push_back(range_op(side));
    failure.push_back(range_op(side));
  }
  if (!records_prefix.empty()) {
    Json records = {{"request_range", range_prefix_request(records_prefix)}};
    success.push_back(records);
    failure.push_back(records);
    for (std::size_t i = 1; i < puts.size(); ++i) {
      success.push_back(puts[i]);
    }
  }
  return txn_request(Json::array({create_revision_is(key, 0)}), std::move(success),
                     std::move(failure));
}

Json watch_prefix_deletes_request(const std::string& prefix, std::int64_t start_revision)
{
  Json request = watch_deletes_request(prefix, start_revision);
  request["create_request"]["range_end"] = base64_encode(prefix_end(prefix));
  return request;
}

std::optional<Json> watch_queue_and_delay_request(const std::string& lock_prefix,
                                                  const std::string& delay_key,
                                                  std::int64_t start_revision)
{
  if (lock_prefix.empty()
      || delay_key != lock_prefix.substr(0, lock_prefix.size() - 1) + "#delay") {
    return std::nullopt; // PFX/ less its slash, then #delay: else the side keys lie elsewhere
  }
  return Json{{"create_request",
               {{"key", base64_encode(delay_key)},
                {"range_end", base64_encode(prefix_end(lock_prefix))},
                {"start_revision", std::to_string(start_revision)}}}};
}

Json watch_prefix_request(const std::string& prefix, std::int64_t start_revision)
{
  return {{"create_request",
           {{"key", base64_encode(prefix)},
            {"range_end", base64_encode(prefix_end(prefix))},
            {"start_revision", std::to_string(start_revision)}}}};
}

Json watch_deletes_request(const std::string& key, std::int64_t start_revision)
{
  return {{"create_request",
           {{"key", base64_encode(key)},
            {"start_revision", std::to_string(start_revision)},
            {"filters", Json::array({"NOPUT"})}}}};
}

Json authenticate_request(const std::string& user, const std::string& password)
{
  return {{"name", user}, {"password", password}};
}

std::optional<lock::LockKind> member_kind(const KeyValue& kv, std::string_view lock_prefix)
{
  if (is_lock_key(kv.key, lock_prefix)) {
    std::string code = dlock_holder_of(kv) ? string_field(record_of(kv), "kind") : "";
    std::optional<lock::LockKind> kind = lock::LockKind::from_code(code);
    // A reader's record is never under PFX/<hex>: that key is exclusive whatever it says.
    return kind && kind->mode == lock::LockKind::Mode::limit ? *kind : lock::LockKind::exclusive();
  }
  for (std::string_view sub : {"read/", "write/"}) {
    std::string inner = std::string(lock_prefix).append(sub);
    if (!is_lock_key(kv.key, inner)) {
      continue;
    }
    // dlock's own record here is a reader of this name, or a key of the name NAME/read.
    bool dlock = dlock_holder_of(kv).has_value();
    if (sub == "read/") {
      if (dlock && string_field(record_of(kv), "kind") != "shared") {
        return std::nullopt;
      }
      return lock::LockKind::shared();
    }
    return dlock ? std::nullopt : std::optional(lock::LockKind::exclusive());
  }
  return std::nullopt;
}

std::vector<Member> queue_of(const Json& range_response, const std::string& lock_prefix,
                             const Json* records, std::string_view records_prefix)
{
  std::vector<KeyValue> candidates = records ? key_values(*records) : std::vector<KeyValue>{};
  std::vector<Member> out;
  for (KeyValue& kv : key_values(range_response)) {
    if (std::optional<lock::LockKind> kind = member_kind(kv, lock_prefix)) {
      out.push_back(Member{.kv = candidates.empty()
                                   ? std::move(kv)
                                   : with_record(std::move(kv), candidates, records_prefix),
                           .kind = *kind});
    }
  }
  return out;
}

bool kinds_mix(const lock::LockKind& a, const lock::LockKind& b)
{
  using Mode = lock::LockKind::Mode;
  return a.mode == Mode::limit || b.mode == Mode::limit ? a == b : true;
}

std::size_t holders_of(const std::vector<Member>& queue)
{
  using Mode = lock::LockKind::Mode;
  if (queue.empty()) {
    return 0;
  }
  switch (queue.front().kind.mode) {
  case Mode::exclusive:
    return 1;
  case Mode::limit:
    return std::min(queue.size(), static_cast<std::size_t>(queue.front().kind.limit));
  case Mode::shared:
    break;
  }
  std::size_t n = 0;
  while (n < queue.size() && queue[n].kind.mode == Mode::shared) {
    ++n;
  }
  return n;
}

Json kind_fields(const lock::LockKind& kind)
{
  return kind.has_slots() ? Json{{"kind", kind.code()}} : Json::object();
}

std::vector<KeyValue> lock_keys(const Json& range_response, const std::string& lock_prefix)
{
  std::vector<KeyValue> out = key_values(range_response);
  std::erase_if(out, [&](const KeyValue& kv) { return !is_lock_key(kv.key, lock_prefix); });
  return out;
}

const Json* txn_range(const Json& txn_response, std::size_t i)
{
  if (!txn_response.is_object() || !txn_response.contains("responses")) {
    return nullptr;
  }
  const Json& responses = txn_response["responses"];
  if (!responses.is_array() || i >= responses.size() || !responses[i].is_object()
      || !responses[i].contains("response_range")) {
    return nullptr;
  }
  return &responses[i]["response_range"];
}

std::string holder_value(const lock::HolderInfo& holder, const std::string& token_fingerprint,
                         const Json& extra)
{
  Json value = {{"host", holder.host},
                {"pid", holder.pid},
                {"user", holder.user},
                {"command", holder.command},
                {"acquired_ms", holder.acquired_ms},
                {"ttl_ms", holder.ttl_ms},
                {"token", token_fingerprint}};
  if (!holder.note.empty()) {
    value["note"] = holder.note;
  }
  if (!holder.value.empty()) {
    value["value"] = holder.value;
  }
  return with_fields(value, extra);
}

std::string side_key(std::string_view prefix, std::string_view name, std::string_view kind)
{
  std::string key(prefix);
  for (char c : name) {
    if (c == '%' || c == '/') {
      key += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    } else {
      key += c;
    }
  }
  return key.append("#").append(kind);
}

std::string history_prefix(std::string_view prefix, std::string_view name)
{
  return side_key(prefix, name, "history:");
}

std::string history_key(std::string_view history_prefix, std::uint64_t id)
{
  return fmt::format("{}{:016x}", history_prefix, id);
}

bool is_history_key(std::string_view key, std::string_view history_prefix)
{
  if (!key.starts_with(history_prefix) || key.size() != history_prefix.size() + 16) {
    return false;
  }
  key.remove_prefix(history_prefix.size());
  return key.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::int64_t history_lease(std::string_view history_prefix)
{
  std::uint64_t hash = 14695981039346656037ULL; // FNV-1a
  for (char c : history_prefix) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  }
  hash &= 0x7fffffffffffffffULL;
  return static_cast<std::int64_t>(hash == 0 ? 1 : hash);
}

Json range_keys_request(const std::string& prefix, std::int64_t limit, bool newest_first)
{
  return {{"key", base64_encode(prefix)},
          {"range_end", base64_encode(prefix_end(prefix))},
          {"keys_only", true},
          {"limit", std::to_string(limit)},
          {"sort_order", newest_first ? "DESCEND" : "ASCEND"},
          {"sort_target", "CREATE"}};
}

Json grant_request(std::int64_t ttl_s, std::int64_t lease)
{
  return {{"TTL", std::to_string(ttl_s)}, {"ID", std::to_string(lease)}};
}

std::string records_prefix_of(std::string_view prefix, std::string_view name)
{
  return side_key(prefix, name, "elect:");
}

std::string record_key(std::string_view records_prefix, std::string_view key)
{
  std::size_t slash = key.rfind('/');
  return std::string(records_prefix)
    .append(key.substr(slash == std::string_view::npos ? 0 : slash + 1));
}

Json record_puts(const std::string& key, const std::string& record, std::int64_t lease,
                 std::string_view records_prefix)
{
  std::string value = record.size() <= lock::max_holder_record_bytes
                        ? string_field(Json::parse(record, nullptr, false), "value")
                        : "";
  if (value.empty()) {
    return Json::array({put_op(key, record, lease)});
  }
  return Json::array(
    {put_op(key, value, lease), put_op(record_key(records_prefix, key), record, lease)});
}

KeyValue with_record(KeyValue kv, const std::vector<KeyValue>& records,
                     std::string_view records_prefix)
{
  if (kv.value.empty() || kv.value.size() > lock::max_holder_field_bytes) {
    return kv; // no candidate's value (etcdctl lock's, another tenant's)
  }
  std::string wanted = record_key(records_prefix, kv.key);
  for (const KeyValue& record : records) {
    if (record.key != wanted) {
      continue;
    }
    KeyValue candidate = kv;
    candidate.value = record.value;
    std::optional<lock::HolderInfo> holder = dlock_holder_of(candidate);
    if (record.lease == kv.lease && kv.lease != 0 && holder && holder->value == kv.value) {
      return candidate;
    }
    break;
  }
  return kv;
}

Json put_op(const std::string& key, const std::string& value, std::int64_t lease)
{
  return {{"request_put",
           {{"key", base64_encode(key)},
            {"value", base64_encode(value)},
            {"lease", std::to_string(lease)}}}};
}

Json range_op(const std::string& key) { return {{"request_range", range_key_request(key)}}; }

Json delete_op(const std::string& key)
{
  return {{"request_delete_range", {{"key", base64_encode(key)}, {"prev_kv", true}}}};
}

std::vector<KeyValue> txn_deleted(const Json& txn_response, std::size_t i)
{
  if (!txn_response.is_object() || !txn_response.contains("responses")) {
    return {};
  }
  const Json& responses = txn_response["responses"];
  if (!responses.is_array() || i >= responses.size() || !responses[i].is_object()
      || !responses[i].contains("response_delete_range")) {
    return {};
  }
  const Json& deleted = responses[i]["response_delete_range"];
  std::vector<KeyValue> out;
  if (deleted.is_object() && deleted.contains("prev_kvs") && deleted["prev_kvs"].is_array()) {
    for (const Json& kv : deleted["prev_kvs"]) {
      out.push_back(key_value(kv));
    }
  }
  return out;
}

Json create_revision_is(const std::string& key, std::int64_t revision)
{
  return {{"key", base64_encode(key)},
          {"target", "CREATE"},
          {"result", "EQUAL"},
          {"create_revision", std::to_string(revision)}};
}

Json txn_request(Json compare, Json success, Json failure)
{
  return {{"compare", std::move(compare)},
          {"success", std::move(success)},
          {"failure", std::move(failure)}};
}

bool txn_succeeded(const Json& txn_response) { return bool_field(txn_response, "succeeded"); }

Json record_of(const KeyValue& kv)
{
  if (kv.value.size() > lock::max_holder_record_bytes) {
    return nullptr;
  }
  Json record = Json::parse(kv.value, nullptr, false);
  return record.is_object() ? record : Json(nullptr);
}

std::string with_fields(const Json& record, const Json& extra)
{
  Json value = record.is_object() ? record : Json::object();
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      value[it.key()] = *it;
    }
  }
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

lock::HolderInfo holder_of(const KeyValue& kv)
{
  std::optional<lock::HolderInfo> holder = dlock_holder_of(kv);
  if (!holder) {
    holder = lock::HolderInfo{};
    holder->command =
      fmt::format("{} (lease {:x})", kv.value.empty() ? "etcdctl lock" : "not dlock",
                  static_cast<std::uint64_t>(kv.lease));
    holder->value = proposal_of(kv.value);
  }
  holder->fence = kv.create_revision;
  return *holder;
}

std::optional<lock::HolderInfo> dlock_holder_of(const KeyValue& kv)
{
  Json value = kv.value.size() <= lock::max_holder_record_bytes
                 ? Json::parse(kv.value, nullptr, false)
                 : Json();
  // The record's fields as text (numbers as dlock writes them), for the one checked parse of
  // holder records; a field of another type (an array, an object, a fraction) is not dlock's.
  std::vector<std::string> texts;
  bool typed = value.is_object();
  for (auto it = value.begin(); typed && it != value.end(); ++it) {
    if (it->is_string()) {
      texts.push_back(it->get<std::string>());
    } else if (it->is_number_integer()) {
      texts.push_back(it->dump());
    } else {
      typed = false;
    }
  }
  std::optional<lock::HolderInfo> holder;
  if (typed) {
    std::vector<lock::HolderField> fields;
    std::size_t i = 0;
    for (auto it = value.begin(); it != value.end(); ++it) {
      fields.push_back({it.key(), texts[i++]});
    }
    holder = lock::parse_holder_record(fields);
  }
  if (holder && !holder->value.empty() && util::printable(holder->value) != holder->value) {
    holder.reset(); // dlock writes a printable --value only
  }
  if (holder) {
    holder->fence = kv.create_revision;
  }
  return holder;
}

std::string proposal_of(std::string_view value)
{
  std::string_view cut = util::utf8_prefix(value, lock::max_holder_field_bytes);
  return util::printable(cut) == cut ? std::string(cut) : std::string();
}

std::string fingerprint_of(const KeyValue& kv)
{
  if (kv.value.size() > lock::max_holder_record_bytes) {
    return "";
  }
  return string_field(Json::parse(kv.value, nullptr, false), "token");
}

std::string token_fingerprint(const std::string& token)
{
  return lock::token_fingerprint(token, 32);
}

std::optional<Error> answer_error(long http_status, const Json& body, const std::string& where)
{
  if (http_status == 200 && !(body.is_object() && body.contains("error"))) {
    return std::nullopt;
  }
  if (!body.is_object() || !(body.contains("error") || body.contains("message"))) {
    return Error(ExitCode::unavailable,
                 "{} answered HTTP {} without an etcd error: not an etcd "
                 "v3 server?",
                 where, http_status);
  }
  std::string message = error_message(body);
  std::int64_t code = int_field(body, "code");
  if (code == 0 && body.contains("error")) {
    code = int_field(body["error"], "grpc_code"); // a stream's {"error": {"grpc_code": …}}
  }
  bool auth = code == 16 || code == 7 || message.find("authentication failed") != std::string::npos
              || message.find("user name is empty") != std::string::npos
              || message.find("permission denied") != std::string::npos
              || message.find("invalid auth token") != std::string::npos;
  if (auth) {
    return Error(ExitCode::auth, "{} refused: {}", where, message);
  }
  if (code == 14 || code == 4 || message.find("no leader") != std::string::npos
      || message.find("timed out") != std::string::npos) {
    return Error(ExitCode::unavailable, "{} is unavailable: {}", where, message);
  }
  return Error(ExitCode::internal, "{} answered an error dlock cannot explain: {} (code {})", where,
               message, code);
}

bool token_invalid(const Json& body)
{
  std::string message = error_message(body);
  return message.find("invalid auth token") != std::string::npos
         || message.find("user name is empty") != std::string::npos;
}

bool lease_not_found(const Json& body)
{
  return error_message(body).find("lease not found") != std::string::npos;
}

} // namespace dlock::etcd
