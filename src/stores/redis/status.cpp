#include "stores/redis/status.hpp"

#include "stores/redis/cluster.hpp"
#include "stores/redis/scripts.hpp"

#include <algorithm>

namespace dlock::redis {

using lock::HolderInfo;
using lock::LockStatus;

namespace {

std::vector<std::string> inspect_keys(const LockKeys& keys)
{
  return {keys.lock,         keys.holder,  keys.fence, keys.waiters,
          keys.queue_expiry, keys.holders, keys.slots, keys.kind};
}

LockStatus parse_status(const std::string& name, const redisReply& reply)
{
  if (auto redirect = parse_redirect(reply)) {
    throw Redirected(std::move(*redirect));
  }
  throw_if_error(reply, "reading the lock status");
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 10) {
    throw Error(ExitCode::internal, "reading the lock status: unexpected reply ({})",
                describe(reply));
  }
  auto integer = [&](std::size_t i) {
    const redisReply* element = reply.element[i];
    if (element->type == REDIS_REPLY_INTEGER) {
      return static_cast<std::int64_t>(element->integer);
    }
    if (element->type == REDIS_REPLY_STRING) {
      return lock::parse_record_number(std::string_view(element->str, element->len)).value_or(0);
    }
    return std::int64_t{0};
  };
  LockStatus status;
  status.name = name;
  status.held = integer(0) > 0;
  status.ttl_ms = status.held ? integer(1) : 0;
  status.holder = holder_from_hash(*reply.element[2]);
  // A counter dlock did not write is unknown ('?' from the script), not an error.
  status.last_fence =
    reply.element[3]->type == REDIS_REPLY_STRING
      ? lock::parse_fence(std::string_view(reply.element[3]->str, reply.element[3]->len))
      : std::optional<std::int64_t>(integer(3));
  status.waiters = integer(4);
  status.server_time_ms = integer(5);
  status.command_ended = status.held && integer(8) == 1; // kept for its --min-hold
  status.delay_ms = status.held ? 0 : integer(9);        // free after its --lock-delay
  // Held --shared or --limit: the slot holders.
  const redisReply* slots = reply.element[7];
  if (slots->type == REDIS_REPLY_ARRAY && slots->elements > 0 && !status.held) {
    const redisReply* kind = reply.element[6];
    if (kind->type == REDIS_REPLY_STRING) {
      status.kind = lock::LockKind::from_code(std::string_view(kind->str, kind->len))
                      .value_or(lock::LockKind::shared());
    }
    for (std::size_t i = 0; i < slots->elements; ++i) {
      const redisReply* slot = slots->element[i];
      if (slot->type != REDIS_REPLY_ARRAY || slot->elements != 2) {
        continue;
      }
      lock::SlotHolder holder;
      holder.ttl_ms = slot->element[0]->type == REDIS_REPLY_STRING
                        ? lock::parse_record_number(
                            std::string_view(slot->element[0]->str, slot->element[0]->len))
                            .value_or(0)
                        : 0;
      holder.holder = holder_from_hash(*slot->element[1]);
      status.ttl_ms = std::max(status.ttl_ms, holder.ttl_ms);
      status.slots.push_back(std::move(holder));
    }
    std::stable_sort(status.slots.begin(), status.slots.end(),
                     [](const lock::SlotHolder& a, const lock::SlotHolder& b) {
                       return a.holder.acquired_ms < b.holder.acquired_ms;
                     });
    status.held = true;
    status.holder = status.slots.front().holder;
  }
  return status;
}

// SCAN patterns treat these as wildcards; the prefix must match literally.
std::string glob_escape(std::string_view text)
{
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

} // namespace

LockStatus read_status(Connection& connection, std::string_view prefix, const std::string& name,
                       util::TimePoint deadline)
{
  LockKeys keys = LockKeys::make(prefix, name);
  Reply reply = scripts::inspect().run(connection, inspect_keys(keys), {}, deadline);
  return parse_status(name, *reply);
}

std::vector<std::string> scan_lock_names(Connection& connection, std::string_view prefix,
                                         std::string_view pattern, util::Millis request_timeout)
{
  // Lock keys are prefix{name} (exclusive) or prefix{name}:holders (--shared, --limit); the
  // other siblings are skipped.
  std::string match = glob_escape(prefix) + "{" + std::string(pattern) + "}*";
  constexpr std::string_view slots_suffix = "}:holders";
  std::vector<std::string> names;
  std::string cursor = "0";
  do {
    Reply reply = connection.call({"SCAN", cursor, "MATCH", match, "COUNT", "1000"},
                                  util::deadline_after(request_timeout));
    throw_if_error(*reply, "listing locks");
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[1]->type != REDIS_REPLY_ARRAY) {
      throw Error(ExitCode::internal, "listing locks: unexpected reply ({})", describe(*reply));
    }
    cursor.assign(reply->element[0]->str, reply->element[0]->len);
    const redisReply* keys = reply->element[1];
    for (std::size_t i = 0; i < keys->elements; ++i) {
      std::string_view key(keys->element[i]->str, keys->element[i]->len);
      if (key.ends_with(slots_suffix)) {
        key.remove_suffix(slots_suffix.size() - 1);
      }
      if (key.size() >= prefix.size() + 2 && key.back() == '}') {
        names.emplace_back(key.substr(prefix.size() + 1, key.size() - prefix.size() - 2));
      }
    }
  } while (cursor != "0");
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::vector<LockStatus> read_statuses(Connection& connection, std::string_view prefix,
                                      const std::vector<std::string>& names,
                                      util::Millis request_timeout)
{
  std::vector<LockStatus> statuses;
  if (names.empty()) {
    return statuses;
  }
  // The first one loads the script if the cache is empty; the rest are pipelined EVALSHAs.
  statuses.push_back(
    read_status(connection, prefix, names.front(), util::deadline_after(request_timeout)));
  constexpr std::size_t batch = 500;
  for (std::size_t start = 1; start < names.size(); start += batch) {
    std::size_t end = std::min(names.size(), start + batch);
    for (std::size_t i = start; i < end; ++i) {
      connection.send(
        scripts::inspect().evalsha(inspect_keys(LockKeys::make(prefix, names[i])), {}));
    }
    std::vector<std::size_t> flushed; // NOSCRIPT: the cache was flushed meanwhile; redo after
    for (std::size_t i = start; i < end; ++i) {
      Reply reply = connection.receive(util::deadline_after(request_timeout));
      if (is_noscript(*reply)) {
        flushed.push_back(i);
      } else {
        statuses.push_back(parse_status(names[i], *reply));
      }
    }
    for (std::size_t i : flushed) {
      statuses.push_back(
        read_status(connection, prefix, names[i], util::deadline_after(request_timeout)));
    }
  }
  std::sort(statuses.begin(), statuses.end(),
            [](const LockStatus& a, const LockStatus& b) { return a.name < b.name; });
  std::erase_if(statuses, [](const LockStatus& status) { return !status.held; });
  return statuses;
}

} // namespace dlock::redis
