#pragma once

#include "commands/context.hpp"

#include <string>

namespace dlock::commands {

// How `dlock list` prints: a table for people, JSON for scripts, or Prometheus's text format
// for node_exporter's textfile collector.
enum class ListFormat { table, json, prometheus };

// `dlock list [PATTERN] [--format table|json|prometheus] [--json]`
struct ListOptions {
  std::string pattern = "*";
  ListFormat format = ListFormat::table;
};

// `dlock list`: every held lock under the prefix, sorted by name; exit 0.
int list(Context& context, const ListOptions& options);

} // namespace dlock::commands
