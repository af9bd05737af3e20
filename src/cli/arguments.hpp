#pragma once

#include "commands/acquire.hpp"
#include "commands/barrier.hpp"
#include "commands/latch.hpp"
#include "commands/list.hpp"
#include "commands/release.hpp"
#include "commands/renew.hpp"
#include "commands/run.hpp"
#include "commands/status.hpp"
#include "commands/wait.hpp"
#include "stores/config.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace dlock::cli {

// Every option as typed on the command line; turned into the resolved option structs below
// only after CLI11 has parsed, so that all validation reports exit 64 the same way. An option
// that was not given is std::nullopt: an empty value is a value (and usually an error).
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
  std::optional<std::string> key;  // status's KEY
  std::vector<std::string> keys;   // -k, one per occurrence
  std::optional<int> limit;        // --limit N
  bool shared = false;             // -s
  std::optional<std::string> ttl;
  std::optional<std::string> wait;
  bool no_wait = false;
  bool fair = false;
  int conflict_exit_code = static_cast<int>(ExitCode::conflict);
  int wait_replicas = 0;
  std::optional<std::string> wait_replicas_timeout;
  bool json = false;
  std::optional<std::string> token;
  bool force = false;
  std::string pattern = "*";
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
};

// The subcommands, as registered with CLI11.
struct Subcommands {
  CLI::App* run = nullptr;
  CLI::App* status = nullptr;
  CLI::App* list = nullptr;
  CLI::App* acquire = nullptr;
  CLI::App* renew = nullptr;
  CLI::App* release = nullptr;
  CLI::App* wait = nullptr;
  CLI::App* barrier = nullptr;
  CLI::App* latch = nullptr;
};

// Declares every option and subcommand of dlock on app, bound to args.
Subcommands define_command_line(CLI::App& app, Arguments& args);

// Fills the options neither the command line nor the environment set from the config files
// (cli/config_file.hpp): global options, and run's when run is the subcommand. Every file is
// checked whole, whichever the subcommand: Error(config, 78) naming the line.
void apply_config_defaults(CLI::App& app, const Subcommands& sub, Arguments& args);

// How the environment of a command dlock runs differs from dlock's own.
struct EnvironmentChanges {
  std::vector<std::pair<std::string, std::string>> set;
  std::vector<std::string> unset;
};

// Options every subcommand shares, resolved (URLs taken from -u or DLOCK_URL, password read).
struct GlobalOptions {
  stores::StoreConfig store;
  // Keeps the store's password out of a command's environment (DLOCK_PASSWORD, a password
  // in DLOCK_URL); a password file is passed on by name, so nested dlock calls still work.
  EnvironmentChanges hide_password;
};

// Each resolve_* checks what CLI11 cannot and throws Error(usage) naming the option.
GlobalOptions resolve_global(const Arguments& args);
commands::RunOptions resolve_run(const Arguments& args, const GlobalOptions& global);
commands::StatusOptions resolve_status(const Arguments& args);
commands::ListOptions resolve_list(const Arguments& args);
commands::AcquireOptions resolve_acquire(const Arguments& args);
commands::RenewOptions resolve_renew(const Arguments& args);
commands::ReleaseOptions resolve_release(const Arguments& args);
commands::WaitFreeOptions resolve_wait_free(const Arguments& args);
commands::BarrierOptions resolve_barrier(const Arguments& args);
commands::LatchOptions resolve_latch(const Arguments& args);

// The help to point a usage error to: "dlock SUBCOMMAND --help" once a subcommand was seen on
// the command line, else "dlock --help".
std::string help_command(const CLI::App& app);

// A parse error of CLI11 as one line; unknown options are named as such.
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& error);

// The values given to -u/--url on the command line (never the command's own arguments).
std::vector<char*> url_arguments(int argc, char** argv);

// Replaces passwords typed into --url arguments by "***" so `ps` stops showing them; returns
// whether there were any, so the user can be warned.
bool scrub_url_passwords(int argc, char** argv);

} // namespace dlock::cli
