#include "stores/redis/cluster.hpp"

#include <array>
#include <charconv>
#include <cstdint>

namespace dlock::redis {

namespace {

// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
std::uint16_t crc16(std::string_view data)
{
  std::uint16_t crc = 0;
  for (char c : data) {
    crc ^= static_cast<std::uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::optional<int> parse_number(std::string_view text)
{
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::string_view text_of(const redisReply& reply) { return {reply.str, reply.len}; }

} // namespace

int key_slot(std::string_view key)
{
  std::size_t open = key.find('{');
  if (open != std::string_view::npos) {
    std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16(key) % cluster_slots;
}

std::optional<Redirect> parse_redirect(const redisReply& reply)
{
  if (reply.type != REDIS_REPLY_ERROR) {
    return std::nullopt;
  }
  std::string_view text = text_of(reply);
  Redirect redirect;
  if (text.rfind("MOVED ", 0) == 0) {
    text.remove_prefix(6);
  } else if (text.rfind("ASK ", 0) == 0) {
    redirect.ask = true;
    text.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  std::size_t space = text.find(' ');
  std::string_view address =
    space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
  std::size_t colon = address.rfind(':'); // the host may be an IPv6 address
  auto slot = parse_number(text.substr(0, space));
  auto port =
    colon == std::string_view::npos ? std::nullopt : parse_number(address.substr(colon + 1));
  if (!slot || !port || *slot < 0 || *slot >= cluster_slots) {
    throw Error(ExitCode::internal, "a cluster node sent a redirect dlock cannot read: {}",
                text_of(reply));
  }
  redirect.slot = *slot;
  redirect.host = std::string(address.substr(0, colon));
  redirect.port = *port;
  if (redirect.host.empty() || redirect.host == "?") {
    throw Error(ExitCode::unavailable,
                "a cluster node redirects to a node whose address it does not know ({})",
                text_of(reply));
  }
  return redirect;
}

bool is_try_again(const redisReply& reply)
{
  return reply.type == REDIS_REPLY_ERROR && text_of(reply).rfind("TRYAGAIN", 0) == 0;
}

std::optional<std::vector<SlotRange>> parse_cluster_slots(const redisReply& reply)
{
  if (reply.type == REDIS_REPLY_ERROR) {
    std::string_view message = text_of(reply);
    if (message.find("cluster support disabled") != std::string_view::npos
        || classify_error(message) == ExitCode::auth) {
      return std::nullopt;
    }
    throw_if_error(reply, "reading the cluster's slot map");
  }
  auto bad = [&] {
    return Error(ExitCode::internal, "reading the cluster's slot map: unexpected reply ({})",
                 describe(reply));
  };
  if (reply.type != REDIS_REPLY_ARRAY) {
    throw bad();
  }
  std::vector<SlotRange> ranges;
  for (std::size_t i = 0; i < reply.elements; ++i) {
    const redisReply& entry = *reply.element[i];
    if (entry.type != REDIS_REPLY_ARRAY || entry.elements < 3
        || entry.element[0]->type != REDIS_REPLY_INTEGER
        || entry.element[1]->type != REDIS_REPLY_INTEGER
        || entry.element[2]->type != REDIS_REPLY_ARRAY || entry.element[2]->elements < 2
        || entry.element[2]->element[0]->type != REDIS_REPLY_STRING
        || entry.element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
      throw bad();
    }
    const redisReply& master = *entry.element[2];
    ranges.push_back(SlotRange{
      static_cast<int>(entry.element[0]->integer), static_cast<int>(entry.element[1]->integer),
      std::string(text_of(*master.element[0])), static_cast<int>(master.element[1]->integer)});
  }
  return ranges;
}

} // namespace dlock::redis
