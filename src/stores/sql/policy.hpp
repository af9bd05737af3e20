#pragma once

#include "lock/holder.hpp"
#include "util/duration.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace dlock::sql {

// The side record of a lock (the table dlock_policy, one row per lock): what must outlive the
// holder's session, which takes the lock with it when dlock ends. Every dlock that takes the
// session lock reads it in the same step and gives the lock back if it is closed. Times are
// Unix ms by the server's clock; the token is kept as its fingerprint only.
struct PolicyRow {
  std::string token_fp;                   // the holder's token (lock::token_fingerprint)
  std::int64_t session = 0;               // its session (backend pid, connection id)
  std::optional<lock::HolderInfo> holder; // as it recorded itself, --note and value included
  std::int64_t hold_until = 0;            // --min-hold: closed until then (0: none)
  bool released = false;                  // released by its token: only the min-hold keeps it
  std::int64_t delay_ms = 0;              // --lock-delay armed by the holder (0: none)
  std::int64_t ended_at = 0;              // when a later dlock found the session gone (0: not yet)
  std::optional<lock::HolderInfo> replace_by; // a --replace acquirer asked the holder to go
  std::string newest_waiter;                  // the newest --supersede waiter's id
  std::optional<lock::HolderInfo> newest;     // who it is
  std::int64_t newest_until = 0;              // its registration ends then
};

// One row as a database gives it back (the text of each column, capped by the query); the
// numbers and records another tenant wrote wrong read as none, never as an error.
struct PolicyText {
  std::string token_fp, session, holder, hold_until, released, delay_ms, ended_at, replace_by;
  std::string newest_waiter, newest, newest_until;
};
PolicyRow parse_policy_row(const PolicyText& text);

// The columns of dlock_policy (as p) a side record is read from, in the order policy_row
// takes them, each cut by cut(column, bytes) (the database's own SQL) to what dlock writes, so
// that another tenant's huge value is never read whole.
std::string policy_columns(const std::function<std::string(const char*, std::size_t)>& cut);
// The side record of policy_columns' columns in rows (a database's answer), from column first.
template<class Rows> PolicyRow policy_row(const Rows& rows, int row, int first)
{
  return parse_policy_row(PolicyText{.token_fp = rows.text(row, first),
                                     .session = rows.text(row, first + 1),
                                     .holder = rows.text(row, first + 2),
                                     .hold_until = rows.text(row, first + 3),
                                     .released = rows.text(row, first + 4),
                                     .delay_ms = rows.text(row, first + 5),
                                     .ended_at = rows.text(row, first + 6),
                                     .replace_by = rows.text(row, first + 7),
                                     .newest_waiter = rows.text(row, first + 8),
                                     .newest = rows.text(row, first + 9),
                                     .newest_until = rows.text(row, first + 10)});
}

// A holder as kept in one column: its fields joined by US (0x1f), '%' and US escaped; the
// last, the value of dlock elect, is absent from the records of older dlocks.
std::string encode_holder(const lock::HolderInfo& holder);
// The holder of such a column, or nothing when it is not one dlock wrote.
std::optional<lock::HolderInfo> decode_holder(std::string_view text);

// Whether the record closes the lock to token_fp, which has just taken the session lock at
// now: a min-hold not over, or a lock-delay after a holder that vanished (its session is gone
// without a release, since the lock could be taken). ended_at: when the holder's end counts
// from (the record's stamp, else now: the caller stamps it).
struct Closed {
  enum class Why { open, min_hold, lock_delay } why = Why::open;
  util::Millis left{0};
  bool stamp = false; // ended_at must be written (now)
};
Closed closed_to(const PolicyRow& row, const std::string& token_fp, std::int64_t now);

// The same record for status: whether the lock counts as held for a min-hold (left > 0), or
// free after a lock-delay (delay > 0), given that no session holds it.
struct Idle {
  util::Millis held_for{0};  // min-hold left
  util::Millis delay_for{0}; // lock-delay left
};
Idle idle_state(const PolicyRow& row, std::int64_t now);

// The newer --supersede waiter than waiter_id that the record names at now, if any.
std::optional<lock::HolderInfo> superseded(const PolicyRow& row, const std::string& waiter_id,
                                           std::int64_t now);

} // namespace dlock::sql
