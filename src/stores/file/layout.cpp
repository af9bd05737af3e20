#include "stores/file/layout.hpp"

#include "util/error.hpp"
#include "util/sha256.hpp"
#include "util/url.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <utility>

namespace dlock::file {

namespace {

constexpr std::string_view scheme = "file://";
constexpr std::size_t longest_readable = 200; // bytes of encoding kept whole
constexpr std::size_t hashed_prefix = 100;    // bytes of a long encoding kept before its hash

bool kept(unsigned char c, bool first)
{
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'
         || c == '-' || (c == '.' && !first);
}

// A record's fields are separated by tabs and end at a newline: those become spaces.
std::string one_field(std::string_view text)
{
  std::string out(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      c = ' ';
    }
  }
  return out;
}

bool to_number(std::string_view text, std::int64_t& out)
{
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc{} && end == text.data() + text.size();
}

} // namespace

bool is_file_url(std::string_view url) { return url.starts_with("file:"); }

std::string directory_of(std::string_view url)
{
  auto bad = [&](std::string_view why) {
    return Error(ExitCode::usage, "bad file URL '{}': {} (write file:///absolute/directory)",
                 util::url_redacted(url), why);
  };
  if (!url.starts_with(scheme)) {
    throw bad("it must start with file://");
  }
  std::string_view rest = url.substr(scheme.size());
  std::size_t slash = rest.find('/');
  std::string_view host = rest.substr(0, slash);
  if (slash == std::string_view::npos) {
    throw bad(rest.empty() ? "no directory" : "no absolute directory after the host");
  }
  if (!host.empty() && host != "localhost") {
    throw bad(fmt::format("'{}' is not this host: file:// locks are on this host only (a relative "
                          "directory needs file:///{}...)",
                          host, host));
  }
  std::string_view path = rest.substr(slash);
  if (path.find_first_of("?#") != std::string_view::npos) {
    throw bad("a query or fragment means nothing here");
  }
  std::optional<std::string> decoded = util::percent_decode(path);
  if (!decoded || decoded->find('\0') != std::string::npos) {
    throw bad("a malformed %XX escape");
  }
  while (decoded->size() > 1 && decoded->back() == '/') {
    decoded->pop_back();
  }
  return *decoded;
}

std::string file_name_of(std::string_view lock_name)
{
  std::string out;
  for (std::size_t i = 0; i < lock_name.size(); ++i) {
    auto c = static_cast<unsigned char>(lock_name[i]);
    if (kept(c, i == 0)) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  if (out.size() <= longest_readable) {
    return out;
  }
  std::size_t cut = hashed_prefix;
  if (out[cut - 1] == '%') { // never split an escape
    cut -= 1;
  } else if (out[cut - 2] == '%') {
    cut -= 2;
  }
  return out.substr(0, cut) + "~" + util::sha256_hex(lock_name);
}

std::optional<std::string> lock_name_of(std::string_view file_name)
{
  if (file_name.empty() || file_name.find_first_of("+~") != std::string_view::npos) {
    return std::nullopt;
  }
  // The encoding writes upper case only: one name, one file.
  std::optional<std::string> out = util::percent_decode(file_name, util::HexDigits::upper_case);
  if (!out || file_name_of(*out) != file_name) {
    return std::nullopt; // not dlock's encoding of any name (a %41 for 'A', a file of the user's)
  }
  return out;
}

Layout::Layout(std::string directory, std::string_view lock_name)
  : dir(directory == "/" ? std::string() : std::move(directory)), encoded(file_name_of(lock_name))
{
}

std::string Record::serialize() const
{
  std::string line = fmt::format(
    "dlock1\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}", one_field(name), kind.code(), slot, inode,
    one_field(user), one_field(host), pid, acquired_ms, fence, ttl_ms, one_field(command));
  // The note (13th) and the value (14th) are written only when set: a record without them is
  // the one older dlocks wrote, and still read.
  if (!note.empty() || !value.empty()) {
    line += "\t" + one_field(note);
  }
  if (!value.empty()) {
    line += "\t" + one_field(value);
  }
  return line + "\n";
}

std::optional<Record> Record::parse(std::string_view text)
{
  if (text.size() > lock::max_holder_record_bytes) {
    return std::nullopt; // larger than any dlock writes: another tenant's
  }
  if (text.ends_with('\n')) {
    text.remove_suffix(1);
  }
  std::vector<std::string_view> fields;
  for (std::size_t start = 0;;) {
    std::size_t tab = text.find('\t', start);
    if (tab == std::string_view::npos) {
      fields.push_back(text.substr(start));
      break;
    }
    fields.push_back(text.substr(start, tab - start));
    start = tab + 1;
  }
  // Fields after the 14th are a newer dlock's: skipped.
  if (fields.size() < 12 || fields[0] != "dlock1") {
    return std::nullopt;
  }
  Record r;
  r.name = fields[1];
  std::optional<lock::LockKind> kind = lock::LockKind::from_code(fields[2]);
  std::int64_t slot = 0, inode = 0;
  if (!kind || !to_number(fields[3], slot) || !to_number(fields[4], inode)
      || !to_number(fields[7], r.pid) || !to_number(fields[8], r.acquired_ms)
      || !to_number(fields[9], r.fence) || !to_number(fields[10], r.ttl_ms)) {
    return std::nullopt;
  }
  r.kind = *kind;
  r.slot = static_cast<int>(slot);
  r.inode = static_cast<std::uint64_t>(inode);
  r.user = fields[5];
  r.host = fields[6];
  r.command = fields[11];
  if (fields.size() >= 13) {
    r.note = fields[12];
  }
  if (fields.size() >= 14) {
    r.value = fields[13];
  }
  lock::HolderInfo as_holder{.host = r.host,
                             .pid = r.pid,
                             .user = r.user,
                             .command = r.command,
                             .acquired_ms = r.acquired_ms,
                             .fence = r.fence,
                             .ttl_ms = r.ttl_ms,
                             .note = r.note,
                             .value = r.value};
  if (!as_holder.plausible() || r.name.size() > lock::max_holder_record_bytes) {
    return std::nullopt;
  }
  return r;
}

namespace {

// The first line of text (without its newline) and the rest.
std::pair<std::string_view, std::string_view> first_line(std::string_view text)
{
  std::size_t end = text.find('\n');
  if (end == std::string_view::npos) {
    return {text, {}};
  }
  return {text.substr(0, end), text.substr(end + 1)};
}

std::vector<std::string_view> tab_fields(std::string_view line)
{
  std::vector<std::string_view> fields;
  for (std::size_t start = 0;;) {
    std::size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string_view::npos ? tab : tab - start));
    if (tab == std::string_view::npos) {
      return fields;
    }
    start = tab + 1;
  }
}

// A token's or waiter's fingerprint as dlock writes it: 16 lower-case hex digits.
bool is_fingerprint(std::string_view text)
{
  return text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

bool to_time(std::string_view text, std::int64_t& out) { return to_number(text, out) && out >= 0; }

} // namespace

std::string PolicyRecord::serialize() const
{
  return fmt::format("dlockpolicy1\t{}\t{}\t{}\t{}\t{}\n", fingerprint, hold_until_ms,
                     command_ended ? 1 : 0, delay_ms, ended_at_ms)
         + holder.serialize();
}

std::optional<PolicyRecord> PolicyRecord::parse(std::string_view text)
{
  if (text.size() > max_side_file_bytes) {
    return std::nullopt;
  }
  auto [line, rest] = first_line(text);
  std::vector<std::string_view> fields = tab_fields(line);
  PolicyRecord p;
  std::int64_t ended = 0;
  if (fields.size() != 6 || fields[0] != "dlockpolicy1" || !is_fingerprint(fields[1])
      || !to_time(fields[2], p.hold_until_ms) || !to_time(fields[3], ended) || ended > 1
      || !to_time(fields[4], p.delay_ms) || !to_time(fields[5], p.ended_at_ms)) {
    return std::nullopt;
  }
  std::optional<Record> holder = Record::parse(rest);
  if (!holder) {
    return std::nullopt;
  }
  p.fingerprint = fields[1];
  p.command_ended = ended == 1;
  p.holder = std::move(*holder);
  return p;
}

std::int64_t PolicyRecord::free_at(std::int64_t now_ms) const
{
  std::int64_t free = hold_until_ms;
  if (delay_ms > 0) {
    std::int64_t ended = ended_at_ms > 0 ? ended_at_ms : now_ms;
    free = std::max(free, ended > INT64_MAX - delay_ms ? INT64_MAX : ended + delay_ms);
  }
  return free;
}

std::string Announcement::serialize() const
{
  return fmt::format("dlockwho1\t{}\t{}\n", id, at_us) + who.serialize();
}

std::optional<Announcement> Announcement::parse(std::string_view text)
{
  if (text.size() > max_side_file_bytes) {
    return std::nullopt;
  }
  auto [line, rest] = first_line(text);
  std::vector<std::string_view> fields = tab_fields(line);
  std::int64_t at_us = 0;
  if (fields.size() != 3 || fields[0] != "dlockwho1" || !is_fingerprint(fields[1])
      || !to_time(fields[2], at_us)) {
    return std::nullopt;
  }
  std::optional<Record> who = Record::parse(rest);
  if (!who) {
    return std::nullopt;
  }
  return Announcement{.id = std::string(fields[1]), .who = std::move(*who), .at_us = at_us};
}

std::vector<ProcLock> parse_proc_locks(std::string_view text)
{
  std::vector<ProcLock> locks;
  while (!text.empty()) {
    std::size_t end = text.find('\n');
    std::string line(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ProcLock lock;
    char type[16] = {};
    char mode[16] = {};
    long long pid = 0;
    unsigned long long inode = 0;
    int n = 0;
    // "1: FLOCK  ADVISORY  WRITE 15993 fe:00:10954111 0 EOF", a waiter: "1: -> FLOCK  ..."
    std::size_t colon = line.find(": ");
    if (colon == std::string::npos) {
      continue;
    }
    std::string rest = line.substr(colon + 2);
    if (rest.starts_with("-> ")) {
      lock.blocked = true;
      rest = rest.substr(3);
    }
    if (std::sscanf(rest.c_str(), "%15s %*s %15s %lld %x:%x:%llu%n", type, mode, &pid,
                    &lock.dev_major, &lock.dev_minor, &inode, &n)
          < 6
        || std::string_view(type) != "FLOCK") {
      continue;
    }
    lock.write = std::string_view(mode) == "WRITE";
    lock.pid = pid;
    lock.inode = inode;
    locks.push_back(lock);
  }
  return locks;
}

} // namespace dlock::file
