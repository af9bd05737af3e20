#pragma once

#include "lock/holder.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dlock::mysql {

class Rows;

// The name dlock passes to GET_LOCK for prefix + lock name. MySQL allows 64 characters and
// compares names without regard to case (MariaDB 10.11 compares them as given), so a name is
// used as it is only if it has at most 64 characters, all printable ASCII, no upper-case
// letter; any other becomes its first printable ASCII characters (up to 31) + "~" + the first
// 32 hex digits of SHA-256 of the whole name: 64 characters at most, different for each name.
//   "dlock:nightly-backup" -> "dlock:nightly-backup"
//   "dlock:Deploy"         -> "dlock:Deploy~" + left(sha2('dlock:Deploy', 256), 32)
std::string server_lock_name(std::string_view prefixed_name);

// Slot i of the semaphore (--limit N) of prefix + lock name: the GET_LOCK name of
// prefix + name + "\x1f" + "slot " + i (server_lock_name, so always the hashed form:
// "dlock:NAME~" + left(sha2(CONCAT('dlock:NAME', X'1F', 'slot ', i), 256), 32)), which no lock
// name can have (no control characters). A holder takes the first free one of 0 .. N-1.
std::string slot_lock_name(std::string_view prefixed_name, int slot);

// --shared: reader name i (0 <= i < reader_slots) of prefix + lock name, made as slot names
// are, of "reader " + i. A shared holder takes the lock's own name (the writer's) for a moment,
// then the first free reader name, and gives the writer's name back; an exclusive holder takes
// the writer's name, then waits until no reader name is held. So a waiting exclusive holder
// holds back new shared ones, and a plain GET_LOCK of the lock's name (another client's)
// excludes dlock's shared holders as an exclusive one does.
constexpr int reader_slots = 64; // shared holders at once; more wait
std::string reader_lock_name(std::string_view prefixed_name, int reader);

// The name a --fair waiter's session holds while it has a ticket in dlock_queue
// ("dlock queue " + 48 hex digits of SHA-256 of the token): its row is live while it is held.
std::string queue_lock_name(std::string_view token);

// The second lock a holding session takes, whose name is made of the token's fingerprint
// ("dlock token " + 48 hex digits of SHA-256 of the token): another dlock process that was
// given the token (a nested run, the renewer of a stopped job, release --token) finds the
// holding session by it, as IS_USED_LOCK of both names is then the same connection. The
// token itself never reaches the server; no table or privilege is needed.
std::string token_lock_name(std::string_view token);

// bytes as an SQL literal that no character set or sql_mode can misread: X'...' (hex).
std::string sql_bytes(std::string_view bytes);

// Who holds a lock, from what the server knows: the holder that dlock wrote in dlock_fence
// when that row is the holding connection's, else a holder that is not dlock (no host, user
// or pid) whose command says what the server shows of the connection: its id, and its user
// and client host from information_schema.PROCESSLIST (empty when the server does not show
// it to dlock's user).
struct SessionRow {
  std::int64_t connection = 0;
  std::string user;                        // PROCESSLIST.USER
  std::string client_host;                 // PROCESSLIST.HOST: "host:port" or "localhost"
  std::optional<lock::HolderInfo> written; // dlock_fence's holder of that connection
};
lock::HolderInfo holder_of_session(const SessionRow& row);

// The columns of dlock_fence (as f) that a holder is read from: fence, acquired_ms,
// connection_id, holder_user, holder_host, holder_pid, command, the text cut to what dlock
// writes (another tenant may have written the rows, or made the table with other types).
std::string fence_columns();
// The holder from a row whose columns from first on are id, USER, HOST and, from fence on,
// those of fence_columns (dlock's record when that row is the holding connection's).
lock::HolderInfo read_holder(const Rows& rows, int row, int first, int fence);

} // namespace dlock::mysql
