#pragma once

#include "util/error.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dlock::cli {

// Every option as typed on the command line (cli/options.hpp declares them); turned into the
// resolved option structs (cli/validation.hpp) only after CLI11 has parsed, so that all
// validation reports exit 64 the same way. An option that was not given is std::nullopt: an
// empty value is a value (and usually an error).
struct Arguments {
  // global
  std::vector<std::string> urls; // -u, one per occurrence; DLOCK_URL is read by resolve_global
  std::string password_file;
  std::string sentinel_password_file;
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  std::string prefix = "dlock:";
  std::string connect_timeout = "2s";
  bool verbose = false;
  bool quiet = false;
  bool syslog = false;               // --syslog: events to syslog(3) too
  std::optional<std::string> config; // --config FILE (or DLOCK_CONFIG)
  // shared by subcommands
  std::optional<std::string> key; // status's KEY
  std::vector<std::string> keys;  // -k, one per occurrence
  std::optional<int> limit;       // --limit N
  bool shared = false;            // -s
  std::optional<std::string> ttl;
  std::optional<std::string> wait;
  bool no_wait = false;
  bool fair = false;
  int conflict_exit_code = static_cast<int>(ExitCode::conflict);
  std::optional<std::string> min_hold;   // --min-hold D
  std::optional<std::string> lock_delay; // --lock-delay D
  bool replace = false;                  // --replace
  bool supersede = false;                // --supersede
  std::optional<std::string> note;       // --note TEXT
  int wait_replicas = 0;
  std::optional<std::string> wait_replicas_timeout;
  bool json = false;
  std::optional<std::string> token;
  bool force = false;
  std::string pattern = "*";
  std::optional<std::string> format; // list --format table|json|prometheus
  // acquire --keep
  bool keep = false;
  std::optional<long long> while_pid;
  std::optional<std::string> keep_on_lost;
  // barrier, latch
  std::optional<long long> parties;     // barrier --parties N
  std::optional<long long> latch_count; // latch --count N
  bool latch_down = false;              // latch --down
  std::optional<std::string> expire;    // latch --expire D
  // run
  std::optional<std::string> shell_command;
  std::string on_lost = "stop";
  std::optional<std::string> kill_after;
  std::optional<std::string> max_hold;
  bool export_password = false;
  bool record_command = false;            // run --record-command
  std::optional<std::string> metrics_dir; // run --metrics-dir DIR
  std::vector<std::string> command;
  // elect, leader
  std::optional<std::string> value; // elect --value TEXT
  bool keep_campaigning = false;    // elect --keep-campaigning
  bool watch = false;               // leader --watch
};

} // namespace dlock::cli
