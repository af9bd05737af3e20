#include "stores/sql/history.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace dlock::sql {

namespace {

// The lock's rows: its key (indexed), and its name (another name of the same key is another
// lock's).
std::string lock_rows(const HistorySql& sql)
{
  return fmt::format("lock_key = {} AND name = {}", sql.key, sql.name);
}

} // namespace

std::string history_trim_sql(const HistorySql& sql, std::size_t keep)
{
  // the id of the oldest row kept, through the index (a derived table: MySQL deletes from a
  // table that its subquery reads only so)
  return fmt::format("DELETE FROM {0} WHERE {1} AND id < (SELECT k.id FROM (SELECT id FROM {0} "
                     "WHERE {1} ORDER BY id DESC LIMIT 1 OFFSET {2}) k)",
                     sql.table, lock_rows(sql), std::max<std::size_t>(keep, 1) - 1);
}

std::string history_expire_sql(const HistorySql& sql)
{
  return fmt::format("DELETE FROM {0} WHERE id IN (SELECT k.id FROM (SELECT id FROM {0} WHERE "
                     "at_ms < {1} - {2} ORDER BY at_ms LIMIT {3}) k)",
                     sql.table, sql.now_ms, lock::history_keep.count(), history_expired_per_record);
}

std::string history_read_sql(const HistorySql& sql, const std::string& capped_event,
                             std::size_t limit)
{
  return fmt::format("SELECT {} FROM {} WHERE {} ORDER BY id DESC LIMIT {}", capped_event,
                     sql.table, lock_rows(sql), limit);
}

std::vector<std::string> kept_events(std::vector<std::string> texts)
{
  std::erase_if(texts, [](const std::string& text) { return text.size() > lock::max_event_bytes; });
  return texts;
}

} // namespace dlock::sql
