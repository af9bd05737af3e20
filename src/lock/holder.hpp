#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::lock {

// Who holds a lock: stored beside the lock for status, list and conflict messages.
struct HolderInfo {
  std::string host;
  std::int64_t pid = 0;
  std::string user;
  std::string command; // the program's name, or its truncated command line (recorded_command)
  std::int64_t acquired_ms = 0; // Unix time in ms, from the store's clock
  std::int64_t fence = 0;       // fencing token handed to this holder
  std::int64_t ttl_ms = 0;      // lease length the holder asked for
  // Why it is held (--note): printable, at most max_note_chars; shown wherever the holder is.
  std::string note;
  // What a leader proclaims (dlock elect --value: an address, a version): printable, at most
  // max_holder_field_bytes; empty for a holder that is not a candidate. `leader` shows it.
  std::string value;

  // This process: host name, pid, user name and the given command (each truncated to
  // max_holder_field_bytes).
  static HolderInfo current(const std::string& command);
  // A record someone else wrote in dlock's place (another tenant of the store): the lock is
  // held, by nobody dlock can name.
  static HolderInfo not_dlock();
  // "user@host pid 123 (cmd)" for one-line messages, with ": note" when there is one.
  std::string describe() const;
  // "user@host pid 123": who, without the command or the note, for logs that others read.
  std::string identity() const;
  // Whether other names the same holder process (a store of several nodes records one holder
  // on each, with its own fencing token and times).
  bool same_holder(const HolderInfo& other) const
  {
    return host == other.host && pid == other.pid && user == other.user && command == other.command;
  }
  // Whether this is a record dlock could have written: text fields within
  // max_holder_field_bytes, numbers not negative. A store's parser that has typed values
  // (JSON) checks them with this; parse_holder_record does it for text fields.
  bool plausible() const;
};

// Longest text field (host, user, command) of a holder record dlock writes or accepts, in bytes.
inline constexpr std::size_t max_holder_field_bytes = 256;
// Longest --note: in characters as given, and in bytes as a record field (4 bytes each at most).
inline constexpr std::size_t max_note_chars = 256;
inline constexpr std::size_t max_note_bytes = 4 * max_note_chars;
// Longest command line kept in the metadata, in bytes.
inline constexpr std::size_t max_command_length = max_holder_field_bytes;
// Longest holder record dlock writes or reads, all names and values together, in bytes: what
// another tenant of the store wrote larger is not a dlock holder, and a store reads no more
// than this of it (a 64 MB record cost seconds and a gigabyte per read).
inline constexpr std::size_t max_holder_record_bytes = 4096;

// One field of a holder record as a store gives it back: its name and its text.
struct HolderField {
  std::string_view name;
  std::string_view value;
};

// The holder a record's fields describe, or nothing when it is not a dlock holder's: larger
// than max_holder_record_bytes in all, a text field longer than max_holder_field_bytes, or a
// number (pid, acquired_ms, fence, ttl_ms) that parse_record_number refuses. Unknown fields
// are skipped (but counted in the size); missing ones stay empty. Never throws.
std::optional<HolderInfo> parse_holder_record(std::span<const HolderField> fields);

// A number a store gives back in a record (pid, times, fence): plain decimal digits that fit
// an int64, or nothing (a sign, blanks, "1e3", an overflow are not dlock's). Never throws.
std::optional<std::int64_t> parse_record_number(std::string_view text);

// A fencing counter as read from a store: nothing when it is not one dlock wrote (see
// parse_record_number), so a lock's status still shows, with the token unknown.
inline std::optional<std::int64_t> parse_fence(std::string_view text)
{
  return parse_record_number(text);
}

// What a holder records of its command, which every reader of the store sees: the program's
// name (the last part of argv[0]: "sh" for -c 'STRING'), since arguments may carry secrets;
// the whole command line, truncated, only with whole_line (--record-command).
std::string recorded_command(const std::vector<std::string>& argv, bool whole_line);

// What is written instead of a holder's token wherever others may read it (a store's record,
// a session's name, a local state file's name): the first hex_digits of its SHA-256. Each
// store keeps the length it has always written, so that what it stored stays readable.
std::string token_fingerprint(std::string_view token, std::size_t hex_digits = 16);

} // namespace dlock::lock
