#pragma once

#include "cli/options.hpp"

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
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  std::string prefix = "dlock:";
  std::string connect_timeout = "2s";
  bool verbose = false;
  bool quiet = false;
  // shared by subcommands
  std::optional<std::string> key;
  std::optional<std::string> ttl;
  std::optional<std::string> wait;
  bool no_wait = false;
  bool fair = false;
  int conflict_exit_code = 75;
  bool json = false;
  std::optional<std::string> token;
  bool force = false;
  std::string pattern = "*";
  // run
  std::optional<std::string> shell_command;
  std::string on_lost = "stop";
  std::optional<std::string> kill_after;
  std::optional<std::string> max_hold;
  bool export_password = false;
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
};

// Declares every option and subcommand of dlock on app, bound to args.
Subcommands define_command_line(CLI::App& app, Arguments& args);

GlobalOptions resolve_global(const Arguments& args);
RunOptions resolve_run(const Arguments& args);
StatusOptions resolve_status(const Arguments& args);
ListOptions resolve_list(const Arguments& args);
AcquireOptions resolve_acquire(const Arguments& args);
RenewOptions resolve_renew(const Arguments& args);
ReleaseOptions resolve_release(const Arguments& args);

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
