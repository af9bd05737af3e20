#pragma once

#include "cli/arguments.hpp"

#include <CLI/CLI.hpp>

#include <string>

// The command line as CLI11 knows it: every option and subcommand declared, bound to
// Arguments, their defaults taken from the config files, and CLI11's errors put in words.
namespace dlock::cli {

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
  CLI::App* elect = nullptr;
  CLI::App* leader = nullptr;
  CLI::App* history = nullptr;
};

// Declares every option and subcommand of dlock on app, bound to args.
Subcommands define_command_line(CLI::App& app, Arguments& args);

// Fills the options neither the command line nor the environment set from the config files
// (cli/config_file.hpp): global options, and run's when run (or elect) is the subcommand. Every
// file is checked whole, whichever the subcommand: Error(config, 78) naming the line.
void apply_config_defaults(CLI::App& app, const Subcommands& sub, Arguments& args);

// The help to point a usage error to: "dlock SUBCOMMAND --help" once a subcommand was seen on
// the command line, else "dlock --help".
std::string help_command(const CLI::App& app);

// A parse error of CLI11 as one line; unknown options are named as such.
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& error);

} // namespace dlock::cli
