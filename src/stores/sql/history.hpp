#pragma once

#include "lock/history.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace dlock::sql {

// A lock's history (lock::History) as PostgreSQL and MySQL keep it: the table dlock_history
// beside dlock_fence, made on first use where that one is and trusted as it is, one row per
// event: id (the order events came in), lock_key (the lock's key as dlock_fence keeps it),
// name (prefix + lock name), at_ms (the server's clock, Unix ms) and event (encode_event's
// text, kept as it is). Recording is one statement or one round trip, on the session of the
// lock when this process has one (else the control session), in a transaction of its own: the
// insert, then the lock's rows beyond max_history_events (through the index on (lock_key, id))
// and a few rows of any lock older than history_keep (through the index on at_ms) go, so each
// event is kept history_keep at most and a lock's history goes history_keep after its last
// event. A read asks for the newest texts cut at history_read_bytes and leaves longer ones
// out: another tenant's rows are never read whole.

// The columns of dlock_history, in the order the statements below name them.
inline constexpr const char* history_columns = "lock_key, name, at_ms, event";
// Rows older than history_keep that one record removes at most, of any lock: more than one
// record adds, so that the table drains the histories of locks no longer used.
inline constexpr int history_expired_per_record = 16;
// The most bytes of an event a read asks for: one more than max_event_bytes, so that a longer
// text is seen to be one (and left out).
inline constexpr std::size_t history_read_bytes = lock::max_event_bytes + 1;

// One database's words for the parts of dlock_history's statements.
struct HistorySql {
  std::string table;  // dlock_history, qualified as the database needs
  std::string key;    // the lock's key: a parameter or a literal
  std::string name;   // prefix + lock name: a parameter or a literal
  std::string now_ms; // the server's clock, in Unix ms
};

// Deletes the lock's rows but the newest keep of those the statement sees.
std::string history_trim_sql(const HistorySql& sql, std::size_t keep);
// Deletes up to history_expired_per_record rows, of any lock, older than history_keep.
std::string history_expire_sql(const HistorySql& sql);
// The lock's newest events, newest first, at most limit; capped_event: the event column cut
// at history_read_bytes, in the database's words.
std::string history_read_sql(const HistorySql& sql, const std::string& capped_event,
                             std::size_t limit);
// The texts a read found, newest first, without those longer than max_event_bytes.
std::vector<std::string> kept_events(std::vector<std::string> texts);

} // namespace dlock::sql
