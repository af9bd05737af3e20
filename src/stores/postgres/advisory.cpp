#include "stores/postgres/advisory.hpp"

#include "util/sha256.hpp"

#include <fmt/format.h>

#include <charconv>

namespace dlock::postgres {

AdvisoryKey AdvisoryKey::of(std::string_view prefixed_name)
{
  auto digest = util::sha256(prefixed_name);
  std::uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) {
    bits = bits << 8 | digest[i];
  }
  return AdvisoryKey{static_cast<std::int64_t>(bits)};
}

std::string application_name(const std::string& token, const lock::HolderInfo& me)
{
  std::string name = "dlock " + token_fingerprint(token) + " " + me.user + "@" + me.host + ":"
                     + std::to_string(me.pid);
  if (name.size() > 63) {
    // keep the pid: cut the host name
    std::string tail = ":" + std::to_string(me.pid);
    name = name.substr(0, 63 - tail.size() - 1) + "~" + tail;
  }
  return name;
}

lock::HolderInfo holder_of_session(std::string_view application_name, std::string_view role,
                                   std::string_view client_address, std::int64_t backend_pid)
{
  lock::HolderInfo holder;
  std::string where = client_address.empty() ? "the local socket" : std::string(client_address);
  holder.command = fmt::format("PostgreSQL session pid {} from {}", backend_pid, where);
  // "dlock " + 16 hex digits + " " + user@host:pid
  constexpr std::string_view mark = "dlock ";
  if (application_name.starts_with(mark) && application_name.size() > mark.size() + 17) {
    std::string_view who = application_name.substr(mark.size() + 17);
    std::size_t at = who.find('@');
    std::size_t colon = who.rfind(':');
    std::int64_t pid = 0;
    if (at != std::string_view::npos && colon != std::string_view::npos && colon > at
        && std::from_chars(who.data() + colon + 1, who.data() + who.size(), pid).ec
             == std::errc()) {
      holder.user = std::string(who.substr(0, at));
      holder.host = std::string(who.substr(at + 1, colon - at - 1));
      holder.pid = pid;
      return holder;
    }
  }
  holder.user = std::string(role);
  holder.host = client_address.empty() ? "local" : std::string(client_address);
  holder.pid = backend_pid;
  if (!application_name.empty()) {
    holder.command += fmt::format(" ({})", application_name);
  }
  return holder;
}

} // namespace dlock::postgres
