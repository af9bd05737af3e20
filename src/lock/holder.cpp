#include "lock/holder.hpp"

#include "util/text.hpp"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <cstdlib>
#include <string_view>

namespace dlock::lock {

namespace {

std::int64_t to_int(std::string_view text)
{
  std::int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

std::string user_name()
{
  if (const passwd* entry = ::getpwuid(::geteuid()); entry != nullptr && entry->pw_name != nullptr) {
    return entry->pw_name;
  }
  if (const char* env = std::getenv("USER"); env != nullptr) {
    return env;
  }
  return std::to_string(::geteuid());
}

} // namespace

HolderInfo HolderInfo::current(const std::string& command_line)
{
  HolderInfo info;
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) {
    info.host = host.data();
  }
  info.pid = ::getpid();
  info.user = user_name();
  info.command = std::string(util::utf8_prefix(command_line, max_command_length));
  return info;
}

HolderInfo HolderInfo::from_hash(const redisReply& reply)
{
  HolderInfo info;
  if (reply.type != REDIS_REPLY_ARRAY) {
    return info;
  }
  for (std::size_t i = 0; i + 1 < reply.elements; i += 2) {
    const redisReply* field = reply.element[i];
    const redisReply* value = reply.element[i + 1];
    if (field->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING) {
      continue;
    }
    std::string_view name(field->str, field->len);
    std::string text(value->str, value->len);
    if (name == "host") {
      info.host = text;
    } else if (name == "pid") {
      info.pid = to_int(text);
    } else if (name == "user") {
      info.user = text;
    } else if (name == "command") {
      info.command = text;
    } else if (name == "acquired_ms") {
      info.acquired_ms = to_int(text);
    } else if (name == "fence") {
      info.fence = to_int(text);
    } else if (name == "ttl_ms") {
      info.ttl_ms = to_int(text);
    }
  }
  return info;
}

std::string HolderInfo::describe() const
{
  if (host.empty() && pid == 0) {
    return "an unknown holder";
  }
  return fmt::format("{}@{} pid {} ({})", util::printable(user), util::printable(host), pid,
                     util::printable(command));
}

} // namespace dlock::lock
