#include "stores/mysql/names.hpp"

#include "stores/mysql/session.hpp"

#include "util/sha256.hpp"

#include <fmt/format.h>

namespace dlock::mysql {

namespace {

// The longest GET_LOCK name MySQL accepts (MariaDB has no limit).
constexpr std::size_t longest_name = 64;

bool kept_as_is(char c) { return c >= ' ' && c <= '~' && !(c >= 'A' && c <= 'Z'); }

} // namespace

std::string server_lock_name(std::string_view prefixed_name)
{
  bool plain = prefixed_name.size() <= longest_name;
  for (char c : prefixed_name) {
    plain = plain && kept_as_is(c);
  }
  if (plain) {
    return std::string(prefixed_name);
  }
  std::string shown;
  for (char c : prefixed_name) {
    if (c < ' ' || c > '~' || shown.size() == 31) {
      break;
    }
    shown.push_back(c);
  }
  return shown + "~" + util::sha256_hex(prefixed_name).substr(0, 32);
}

std::string slot_lock_name(std::string_view prefixed_name, int slot)
{
  return server_lock_name(std::string(prefixed_name) + "\x1f" + "slot " + std::to_string(slot));
}

std::string reader_lock_name(std::string_view prefixed_name, int reader)
{
  return server_lock_name(std::string(prefixed_name) + "\x1f" + "reader " + std::to_string(reader));
}

std::string queue_lock_name(std::string_view token)
{
  return "dlock queue " + lock::token_fingerprint(std::string(token) + "\x1fqueue", 48);
}

std::string token_lock_name(std::string_view token)
{
  return "dlock token " + lock::token_fingerprint(token, 48);
}

std::string sql_bytes(std::string_view bytes)
{
  if (bytes.empty()) {
    return "''";
  }
  std::string literal = "X'";
  for (unsigned char c : bytes) {
    literal += fmt::format("{:02x}", c);
  }
  return literal + "'";
}

lock::HolderInfo holder_of_session(const SessionRow& row)
{
  // Without the PROCESS privilege, PROCESSLIST shows only the user's own sessions.
  std::string where = row.client_host.empty()
                        ? "a client this user cannot see (PROCESSLIST needs PROCESS)"
                        : row.client_host;
  if (row.written) {
    lock::HolderInfo holder = *row.written;
    if (holder.command.empty()) {
      holder.command = fmt::format("MySQL connection {}", row.connection);
    }
    return holder;
  }
  // nobody dlock can name (no host, user or pid: the connection id is none of them), with what
  // the server says of the session
  lock::HolderInfo holder;
  holder.command =
    row.user.empty()
      ? fmt::format("MySQL connection {} from {}", row.connection, where)
      : fmt::format("MySQL connection {} of {} from {}", row.connection, row.user, where);
  return holder;
}

std::string fence_columns()
{
  // numbers are read checked; the text is cut (lock::max_holder_record_bytes), so that no row
  // takes memory without bound
  auto cut = [](const char* column) {
    return fmt::format("LEFT(CAST({} AS BINARY), {})", column, lock::max_holder_record_bytes + 1);
  };
  return fmt::format("f.fence, f.acquired_ms, f.connection_id, {}, {}, f.holder_pid, {} ",
                     cut("f.holder_user"), cut("f.holder_host"), cut("f.command"));
}

lock::HolderInfo read_holder(const Rows& rows, int row, int first, int fence)
{
  SessionRow session;
  session.connection = rows.number(row, first);
  session.user = rows.text(row, first + 1);
  session.client_host = rows.text(row, first + 2);
  std::optional<std::int64_t> writer = lock::parse_record_number(rows.text(row, fence + 2));
  if (!rows.null(row, fence + 2) && writer == session.connection) {
    std::string numbers[] = {rows.text(row, fence), rows.text(row, fence + 1),
                             rows.text(row, fence + 5)};
    std::string texts[] = {rows.text(row, fence + 3), rows.text(row, fence + 4),
                           rows.text(row, fence + 6)};
    lock::HolderField fields[] = {{"fence", numbers[0]}, {"acquired_ms", numbers[1]},
                                  {"pid", numbers[2]},   {"user", texts[0]},
                                  {"host", texts[1]},    {"command", texts[2]}};
    session.written = lock::parse_holder_record(fields); // none: another tenant's row
  }
  return holder_of_session(session);
}

} // namespace dlock::mysql
