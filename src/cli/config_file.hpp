#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

// Defaults for global and `run` options from configuration files, so that a cron line on 200
// hosts need not repeat the URL, the password file and the TLS settings. The files are read
// with CLI11's own TOML/INI reader; this file finds them, names the line of a mistake, and
// applies their settings below the command line and the environment.
namespace dlock::cli {

// One "name = value" of a file, with where it was written.
struct ConfigSetting {
  std::string section;             // "" (global options) or "run"
  std::string name;                // the option's long name, without "--"
  std::vector<std::string> values; // one, or an array's
  std::string where;               // "FILE:LINE", for messages
};

// A configuration file, read and checked for form (not yet against the options).
struct ConfigFile {
  std::string path;
  std::vector<ConfigSetting> settings;
};

// The files to read, the most important first: the one --config or DLOCK_CONFIG names (it
// must exist), else the user's ($XDG_CONFIG_HOME/dlock/dlock.conf, or ~/.config/...) and the
// system's (/etc/dlock/dlock.conf, or DLOCK_SYSTEM_CONFIG), those that exist. An empty name
// reads none.
std::vector<std::string> config_paths(const std::optional<std::string>& given);

// Reads one file: Error(config, 78) if it cannot be read, is not a regular file, is owned by
// another user than root and the caller or writable by group or others (ssh's rule: it
// chooses the store and the secrets), or a line is not a setting, naming the line. Warns when
// others may read it and it holds a password (in a URL).
ConfigFile read_config_file(const std::string& path);

// The options of one place settings go to: the global options, or those of `run`; an option
// the command line or the environment set is left alone.
struct ConfigTarget {
  std::string section; // "" or "run"
  CLI::App* app;       // where its options are declared
};

// Applies settings to the targets' options that neither the command line nor the
// environment set, the files' order giving precedence (the first file that sets an option
// wins). Error(config, 78) naming the line for a setting no option has, a section other than
// [run], or a value the option refuses.
void apply_config(const std::vector<ConfigFile>& files, const std::vector<ConfigTarget>& targets);

} // namespace dlock::cli
