#pragma once

#include "stores/postgres/session.hpp"
#include "stores/sql/policy.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace dlock::postgres {

// Where dlock keeps fencing tokens on PostgreSQL: the table dlock_fence, found where the
// role's own search path finds it (each session notes that path, then pins its search_path
// to pg_catalog: session.hpp), and used only if its owner is trusted, since another role's
// table may carry a trigger, rule or policy that would run with dlock's role. Trusted: the
// current role, a role it is a member of (unless it is a superuser, which is a member of
// every role), a superuser, or the database's owner (who owns public since PostgreSQL 15).
struct FenceTable {
  std::string table; // schema-qualified and quoted; empty: there is none yet
  std::string home;  // quoted schema where dlock may create it; empty: the path has none
};

// The query that finds it, with no parameters: one row of (home, qualified name, owner,
// trusted), the last three NULL when there is no table. relname: another table of dlock's
// found and trusted the same way (dlock_policy).
std::string find_fence_table_sql(std::string_view relname = "dlock_fence");

// The table from that query's answer: Error(config) naming the table and its owner when it
// is not trusted.
FenceTable fence_table_from(const Rows& rows, const std::string& shown);

// Creates the table in home (a quoted schema) unless one is there already.
std::string create_fence_table_sql(const std::string& home);
// Creates dlock_queue (the --fair tickets: queue.hpp) in home unless it is there.
std::string create_queue_table_sql(const std::string& home);
// Creates dlock_policy (the side records of sql/policy.hpp) in home unless it is there.
std::string create_policy_table_sql(const std::string& home);
// Creates dlock_history (sql/history.hpp) and its two indexes in home unless they are there.
std::string create_history_table_sql(const std::string& home);
// Whether a CREATE ... IF NOT EXISTS of one of these tables failed only because another
// session made it at the same moment (23505 on a catalog index, 42P07 the relation, 42710 its
// row type): the table is there.
bool made_meanwhile(const std::string& sqlstate);
// sql::policy_columns in PostgreSQL's words (read back with sql::policy_row).
std::string policy_columns();

} // namespace dlock::postgres
