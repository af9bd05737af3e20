#include "commands/keep_record.hpp"

#include "lock/holder.hpp"
#include "process/process_table.hpp"
#include "util/files.hpp"
#include "util/log.hpp"
#include "util/sha256.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

namespace dlock::commands {

namespace {

// A directory of the user's own that nobody else can write, created if missing; "" if none.
std::string state_directory()
{
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string dir = runtime != nullptr && *runtime == '/'
                      ? std::string(runtime) + "/dlock"
                      : fmt::format("/tmp/dlock-{}", ::getuid());
  ::mkdir(dir.c_str(), 0700);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || util::untrusted_because(st)) {
    return {}; // the config files' rule: another user could plant the holder's records there
  }
  return dir;
}

void write_file(const std::string& path, const std::string& text)
{
  if (path.empty()) {
    return;
  }
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
  }
  ::rename(temporary.c_str(), path.c_str());
}

std::optional<std::string> read_file(const std::string& path)
{
  std::ifstream in(path);
  if (path.empty() || !in) {
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string utc_now()
{
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec);
}

} // namespace

KeepRecord::KeepRecord(const std::string& token)
  : m_fingerprint(util::sha256_hex("dlock keep holder\n" + token).substr(0, 32))
{
  std::string dir = state_directory();
  if (!dir.empty()) {
    m_base = dir + "/" + lock::token_fingerprint(token); // never the token itself
  }
}

std::string KeepRecord::path(const char* suffix) const
{
  return m_base.empty() ? std::string() : m_base + suffix;
}

void KeepRecord::keep_process_started(pid_t pid) const
{
  ::unlink(path(".lost").c_str());
  std::optional<std::uint64_t> start = process::start_time(pid);
  write_file(path(".holder"), fmt::format("{} {} {}\n", pid, start.value_or(0), m_fingerprint));
}

bool KeepRecord::signal_keep_process(int sig) const
{
  std::optional<std::string> text = read_file(path(".holder"));
  if (!text) {
    return false;
  }
  std::istringstream fields(*text);
  long pid = 0;
  std::uint64_t start = 0;
  std::string fingerprint;
  if (!(fields >> pid >> start >> fingerprint) || pid <= 1 || start == 0
      || fingerprint != m_fingerprint) {
    return false;
  }
  process::ProcessWatch holder(static_cast<pid_t>(pid));
  return holder.started_at(start) && holder.signal(sig);
}

void KeepRecord::mark_released() const { write_file(path(".released"), "1"); }

void KeepRecord::unmark_released() const { ::unlink(path(".released").c_str()); }

bool KeepRecord::released() const { return read_file(path(".released")).has_value(); }

void KeepRecord::record_lost(const std::string& reason) const
{
  write_file(path(".lost"), utc_now() + ": " + reason);
  ::unlink(path(".holder").c_str());
}

std::optional<std::string> KeepRecord::lost() const { return read_file(path(".lost")); }

void KeepRecord::forget() const
{
  for (const char* suffix : {".holder", ".released", ".lost"}) {
    ::unlink(path(suffix).c_str());
  }
}

bool KeepRecord::report_loss(const std::vector<lock::LockName>& names) const
{
  std::optional<std::string> text = lost();
  if (!text) {
    return false;
  }
  util::log_error("the lease on lock '{}' was lost while acquire --keep held it, at {}",
                  lock::join_names(names), *text);
  forget();
  return true;
}

} // namespace dlock::commands
