#include "lock/holder.hpp"

#include "util/sha256.hpp"
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

std::string user_name()
{
  if (const passwd* entry = ::getpwuid(::geteuid());
      entry != nullptr && entry->pw_name != nullptr) {
    return entry->pw_name;
  }
  if (const char* env = std::getenv("USER"); env != nullptr) {
    return env;
  }
  return std::to_string(::geteuid());
}

} // namespace

HolderInfo HolderInfo::current(const std::string& command)
{
  HolderInfo info;
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) {
    info.host = host.data();
  }
  info.host = std::string(util::utf8_prefix(info.host, max_holder_field_bytes));
  info.pid = ::getpid();
  info.user = std::string(util::utf8_prefix(user_name(), max_holder_field_bytes));
  info.command = std::string(util::utf8_prefix(command, max_command_length));
  return info;
}

HolderInfo HolderInfo::not_dlock()
{
  HolderInfo info;
  info.command = "(not a dlock holder)";
  return info;
}

bool HolderInfo::plausible() const
{
  return host.size() <= max_holder_field_bytes && user.size() <= max_holder_field_bytes
         && command.size() <= max_holder_field_bytes && note.size() <= max_note_bytes
         && value.size() <= max_holder_field_bytes && pid >= 0 && acquired_ms >= 0 && fence >= 0
         && ttl_ms >= 0;
}

std::optional<std::int64_t> parse_record_number(std::string_view text)
{
  if (text.empty() || text.size() > 19) {
    return std::nullopt;
  }
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0
      || text.front() == '-') {
    return std::nullopt;
  }
  return value;
}

std::optional<HolderInfo> parse_holder_record(std::span<const HolderField> fields)
{
  HolderInfo info;
  std::size_t bytes = 0;
  for (const HolderField& field : fields) {
    bytes += field.name.size() + field.value.size();
    if (bytes > max_holder_record_bytes) {
      return std::nullopt;
    }
    std::string* text = field.name == "host"      ? &info.host
                        : field.name == "user"    ? &info.user
                        : field.name == "command" ? &info.command
                        : field.name == "note"    ? &info.note
                        : field.name == "value"   ? &info.value
                                                  : nullptr;
    std::int64_t* number = field.name == "pid"           ? &info.pid
                           : field.name == "acquired_ms" ? &info.acquired_ms
                           : field.name == "fence"       ? &info.fence
                           : field.name == "ttl_ms"      ? &info.ttl_ms
                                                         : nullptr;
    if (text != nullptr) {
      if (field.value.size() > (text == &info.note ? max_note_bytes : max_holder_field_bytes)) {
        return std::nullopt;
      }
      *text = field.value;
    } else if (number != nullptr) {
      std::optional<std::int64_t> value = parse_record_number(field.value);
      if (!value) {
        return std::nullopt;
      }
      *number = *value;
    }
  }
  return info;
}

std::string HolderInfo::describe() const
{
  if (host.empty() && pid == 0) {
    // Not a dlock: what the store could say of it (etcd: "etcdctl lock (lease 694d…)").
    return command.empty() ? "an unknown holder" : util::printable(command);
  }
  std::string text = fmt::format("{}@{} pid {} ({})", util::printable(user), util::printable(host),
                                 pid, util::printable(command));
  if (!note.empty()) {
    text += fmt::format(", note: {}", util::printable(note));
  }
  return text;
}

std::string HolderInfo::identity() const
{
  if (host.empty() && pid == 0) {
    return "a holder that is not dlock"; // what the store made of it may quote another's data
  }
  return fmt::format("{}@{} pid {}", util::printable(user), util::printable(host), pid);
}

std::string recorded_command(const std::vector<std::string>& argv, bool whole_line)
{
  if (argv.empty()) {
    return {};
  }
  if (!whole_line) {
    std::string_view program = argv.front();
    std::size_t slash = program.find_last_of('/');
    if (slash != std::string_view::npos && slash + 1 < program.size()) {
      program.remove_prefix(slash + 1);
    }
    return std::string(util::utf8_prefix(program, max_command_length));
  }
  std::string line;
  for (const std::string& word : argv) {
    if (!line.empty()) {
      line.push_back(' ');
    }
    line += word;
    if (line.size() > max_command_length) {
      break;
    }
  }
  return std::string(util::utf8_prefix(line, max_command_length));
}

std::string token_fingerprint(std::string_view token, std::size_t hex_digits)
{
  return util::sha256_hex(token).substr(0, hex_digits);
}

} // namespace dlock::lock
