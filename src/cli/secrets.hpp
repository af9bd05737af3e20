#pragma once

#include "stores/config.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

// The store's passwords: read from files or the environment, kept out of the environment of
// the command dlock runs, and scrubbed from dlock's own argv so that `ps` does not show them.
namespace dlock::cli {

// How the environment of a command dlock runs differs from dlock's own.
struct EnvironmentChanges {
  std::vector<std::pair<std::string, std::string>> set;
  std::vector<std::string> unset;
};

// The store's passwords, and what keeps them out of a command's environment.
struct StorePasswords {
  std::optional<std::string> password; // --password-file, DLOCK_PASSWORD(_FILE)
  std::optional<std::string>
    sentinel_password; // --sentinel-password-file, DLOCK_SENTINEL_PASSWORD(_FILE)
  // Unsets DLOCK_PASSWORD, DLOCK_SENTINEL_PASSWORD and a password in DLOCK_URL; a password
  // file is passed on by name, so nested dlock calls still work.
  EnvironmentChanges hide;
};

// Reads each password from its file option (empty: none given), else from the environment:
// NAME (the secret itself) or NAME_FILE (where to read it). Error(config) if a file is a
// directory, cannot be read or is empty.
StorePasswords read_store_passwords(const std::string& password_file,
                                    const std::string& sentinel_password_file);

// DLOCK_URL: several URLs separated by blanks (a comma belongs to a Sentinel URL's host list).
std::vector<std::string> environment_urls();

// A store password in memory (a password file, DLOCK_PASSWORD, a URL's): makes dlock's memory
// unreadable to core files and to processes of the same user (ptrace, /proc/PID/mem, environ).
void keep_secrets_out_of_reach(const stores::StoreConfig& store);

// The values given to -u/--url on the command line (never the command's own arguments).
std::vector<char*> url_arguments(int argc, char** argv);

// Replaces passwords typed into --url arguments by "***" so `ps` stops showing them; returns
// whether there were any, so the user can be warned.
bool scrub_url_passwords(int argc, char** argv);

} // namespace dlock::cli
