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

std::string HolderInfo::describe() const
{
  if (host.empty() && pid == 0) {
    // Not a dlock: what the store could say of it (etcd: "etcdctl lock (lease 694d…)").
    return command.empty() ? "an unknown holder" : util::printable(command);
  }
  return fmt::format("{}@{} pid {} ({})", util::printable(user), util::printable(host), pid,
                     util::printable(command));
}

} // namespace dlock::lock
