#include "stores/postgres/fence_table.hpp"

#include "util/text.hpp"

#include <fmt/format.h>

namespace dlock::postgres {

std::string find_fence_table_sql(std::string_view relname)
{
  // dlock.home_path: the role's search path, as the session noted it before pinning its own.
  return "WITH home AS (SELECT pg_catalog.current_setting('dlock.home_path')::pg_catalog.text[] "
         "AS path) "
         "SELECT pg_catalog.quote_ident(h.path[1]), f.name, f.owner, f.trusted FROM home h "
         "LEFT JOIN LATERAL (SELECT pg_catalog.quote_ident(n.nspname::pg_catalog.text) || "
         "'."
         + std::string(relname)
         + "' AS name, pg_catalog.pg_get_userbyid(c.relowner) AS owner, "
           "(c.relowner = me.oid OR o.rolsuper OR c.relowner = d.datdba OR "
           "(NOT me.rolsuper AND pg_catalog.pg_has_role(c.relowner, 'MEMBER'))) AS trusted "
           "FROM pg_catalog.pg_class c "
           "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
           "JOIN pg_catalog.pg_roles o ON o.oid = c.relowner "
           "JOIN pg_catalog.pg_roles me ON me.rolname = CURRENT_USER "
           "JOIN pg_catalog.pg_database d ON d.datname = "
           "pg_catalog.current_database() "
           "WHERE c.relname = '"
         + std::string(relname)
         + "' "
           "AND n.nspname::pg_catalog.text = ANY (h.path) "
           "ORDER BY pg_catalog.array_position(h.path, n.nspname::pg_catalog.text) LIMIT 1) f "
           "ON true";
}

FenceTable fence_table_from(const Rows& rows, const std::string& shown)
{
  FenceTable found;
  if (rows.count() != 1) {
    return found;
  }
  if (!rows.null(0, 0)) {
    found.home = rows.text(0, 0);
  }
  if (rows.null(0, 1)) {
    return found;
  }
  if (!rows.truth(0, 3)) {
    throw Error(ExitCode::config,
                "PostgreSQL at {}: the table {} is owned by role '{}', which dlock does not trust "
                "(its triggers would run as dlock's role); drop it, or have the database's "
                "owner create dlock_fence",
                shown, util::printable(rows.text(0, 1)), util::printable(rows.text(0, 2)));
  }
  found.table = rows.text(0, 1);
  return found;
}

std::string create_fence_table_sql(const std::string& home)
{
  return "CREATE TABLE IF NOT EXISTS " + home
         + ".dlock_fence (lock_key pg_catalog.int8 PRIMARY KEY, name pg_catalog.text NOT NULL, "
           "fence pg_catalog.int8 NOT NULL, acquired_at pg_catalog.timestamptz NOT NULL)";
}

} // namespace dlock::postgres

namespace dlock::postgres {

std::string create_queue_table_sql(const std::string& home)
{
  return "CREATE TABLE IF NOT EXISTS " + home
         + ".dlock_queue (ticket pg_catalog.int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
           "lock_key pg_catalog.int8 NOT NULL, session_id pg_catalog.int8 NOT NULL)";
}

std::string create_policy_table_sql(const std::string& home)
{
  return "CREATE TABLE IF NOT EXISTS " + home
         + ".dlock_policy (lock_key pg_catalog.int8 PRIMARY KEY, name pg_catalog.text NOT NULL, "
           "token_fp pg_catalog.text NOT NULL, session_id pg_catalog.int8 NOT NULL, "
           "holder pg_catalog.text NOT NULL, hold_until pg_catalog.int8 NOT NULL, "
           "released pg_catalog.bool NOT NULL, delay_ms pg_catalog.int8 NOT NULL, "
           "ended_at pg_catalog.int8 NOT NULL, replace_by pg_catalog.text NOT NULL, "
           "newest_waiter pg_catalog.text NOT NULL DEFAULT '', "
           "newest pg_catalog.text NOT NULL DEFAULT '', "
           "newest_until pg_catalog.int8 NOT NULL DEFAULT 0)";
}

std::string create_history_table_sql(const std::string& home)
{
  // one message, one transaction: the table is never seen without its indexes
  return "CREATE TABLE IF NOT EXISTS " + home
         + ".dlock_history (id pg_catalog.int8 GENERATED ALWAYS AS IDENTITY, "
           "lock_key pg_catalog.int8 NOT NULL, name pg_catalog.text NOT NULL, "
           "at_ms pg_catalog.int8 NOT NULL, event pg_catalog.text NOT NULL); "
           "CREATE INDEX IF NOT EXISTS dlock_history_lock ON "
         + home + ".dlock_history (lock_key, id); CREATE INDEX IF NOT EXISTS dlock_history_at ON "
         + home + ".dlock_history (at_ms)";
}

bool made_meanwhile(const std::string& sqlstate)
{
  return sqlstate == "23505" || sqlstate == "42P07" || sqlstate == "42710";
}

std::string policy_columns()
{
  return sql::policy_columns([](const char* column, std::size_t bytes) {
    return fmt::format("left(p.{}::pg_catalog.text, {})", column, bytes);
  });
}

} // namespace dlock::postgres
