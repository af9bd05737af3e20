#include "lock/holder.hpp"

#include "util/text.hpp"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string_view>

namespace dlock::lock {

namespace {

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

HolderInfo HolderInfo::current(const std::string& command)
{
  HolderInfo info;
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) {
    info.host = host.data();
  }
  info.pid = ::getpid();
  info.user = user_name();
  info.command = std::string(util::utf8_prefix(command, max_command_length));
  return info;
}

std::string HolderInfo::describe() const
{
  if (host.empty() && pid == 0) {
    // Not a dlock: what the store could say of it (etcd: "etcdctl lock (lease 694d…)").
    return command.empty() ? "an unknown holder" : util::printable(command);
  }
  return fmt::format("{}@{} pid {} ({})", util::printable(user), util::printable(host), pid,
                     util::printable(command));
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

} // namespace dlock::lock
