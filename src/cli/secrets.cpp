#include "cli/secrets.hpp"

#include "util/error.hpp"
#include "util/url.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

namespace dlock::cli {

namespace {

// The first line of a password file, without a trailing CR.
std::string read_password_file(const std::string& path)
{
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw Error(ExitCode::config, "password file '{}' is a directory", path);
  }
  std::ifstream file(path);
  if (!file) {
    throw Error(ExitCode::config, "cannot read password file '{}': {}", path, std::strerror(errno));
  }
  std::string password;
  std::getline(file, password);
  if (!password.empty() && password.back() == '\r') {
    password.pop_back();
  }
  if (password.empty()) {
    throw Error(ExitCode::config, "password file '{}' is empty", path);
  }
  return password;
}

// A password given by a file option, or else by the environment: NAME (the secret itself) or
// NAME_FILE (where to read it; the form nested dlock calls are given). The file read, if any,
// goes to file_read.
std::optional<std::string> resolve_password(const std::string& option_file, const std::string& name,
                                            std::string& file_read)
{
  const char* env_password = std::getenv(name.c_str());
  const char* env_password_file = std::getenv((name + "_FILE").c_str());
  file_read = option_file;
  if (file_read.empty() && (env_password == nullptr || *env_password == '\0')
      && env_password_file != nullptr) {
    file_read = env_password_file;
  }
  if (!file_read.empty()) {
    return read_password_file(file_read);
  }
  if (env_password != nullptr && *env_password != '\0') {
    return env_password;
  }
  return std::nullopt;
}

// Tells nested calls where a password was read from instead of the password (a file name is
// no secret).
void pass_password_file(EnvironmentChanges& changes, const std::string& name,
                        const std::string& file)
{
  if (!file.empty()) {
    std::error_code error;
    std::filesystem::path absolute = std::filesystem::absolute(file, error);
    changes.set.emplace_back(name, error ? file : absolute.string());
  }
}

// What keeps the passwords out of a command's environment; *_file: where dlock read them
// from, if from files, which nested calls are told instead.
EnvironmentChanges hide_passwords(const std::string& password_file,
                                  const std::string& sentinel_password_file)
{
  EnvironmentChanges changes;
  changes.unset.emplace_back("DLOCK_PASSWORD");
  changes.unset.emplace_back("DLOCK_SENTINEL_PASSWORD");
  std::vector<std::string> urls = environment_urls();
  if (std::any_of(urls.begin(), urls.end(),
                  [](const auto& url) { return util::url_has_password(url); })) {
    std::string without;
    for (const auto& url : urls) {
      without += (without.empty() ? "" : " ") + util::url_without_password(url);
    }
    changes.set.emplace_back("DLOCK_URL", without);
  }
  pass_password_file(changes, "DLOCK_PASSWORD_FILE", password_file);
  pass_password_file(changes, "DLOCK_SENTINEL_PASSWORD_FILE", sentinel_password_file);
  return changes;
}

} // namespace

StorePasswords read_store_passwords(const std::string& password_file,
                                    const std::string& sentinel_password_file)
{
  StorePasswords passwords;
  std::string password_file_read;
  std::string sentinel_password_file_read;
  passwords.password = resolve_password(password_file, "DLOCK_PASSWORD", password_file_read);
  passwords.sentinel_password = resolve_password(sentinel_password_file, "DLOCK_SENTINEL_PASSWORD",
                                                 sentinel_password_file_read);
  passwords.hide = hide_passwords(password_file_read, sentinel_password_file_read);
  return passwords;
}

std::vector<std::string> environment_urls()
{
  std::vector<std::string> urls;
  const char* env = std::getenv("DLOCK_URL");
  std::string_view rest = env != nullptr ? env : "";
  constexpr std::string_view blanks = " \t\n\r\f\v";
  while (true) {
    std::size_t start = rest.find_first_not_of(blanks);
    if (start == std::string_view::npos) {
      return urls;
    }
    rest.remove_prefix(start);
    std::size_t end = std::min(rest.find_first_of(blanks), rest.size());
    urls.emplace_back(rest.substr(0, end));
    rest.remove_prefix(end);
  }
}

// A store password in memory (a password file, DLOCK_PASSWORD, a URL's): no core file may hold
// it, and no process of the same user (the command, once it dropped privileges to the same
// uid, say) may read dlock's memory or environment through ptrace or /proc/PID/mem, environ.
void keep_secrets_out_of_reach(const stores::StoreConfig& store)
{
  bool secret = store.password || store.sentinel_password
                || std::any_of(store.urls.begin(), store.urls.end(),
                               [](const std::string& url) { return util::url_has_password(url); });
  if (secret) {
    ::prctl(PR_SET_DUMPABLE, 0); // the command gets its own again at exec
  }
}

std::vector<char*> url_arguments(int argc, char** argv)
{
  std::vector<char*> urls;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg(argv[i]);
    if (arg == "--") {
      break; // the command's own arguments are not ours to judge or change
    }
    if ((arg == "-u" || arg == "--url") && i + 1 < argc) {
      urls.push_back(argv[++i]);
    } else if (arg.starts_with("--url=")) {
      urls.push_back(argv[i] + 6);
    } else if (arg.starts_with("-u") && !arg.starts_with("--") && arg.size() > 2) {
      urls.push_back(argv[i] + 2);
    }
  }
  return urls;
}

bool scrub_url_passwords(int argc, char** argv)
{
  bool found = false;
  for (char* url : url_arguments(argc, argv)) {
    std::vector<util::PasswordSpan> secrets = util::secret_spans(url);
    if (secrets.empty()) {
      continue;
    }
    found = true;
    // "scheme://user:PASSWORD@rest?password=X" becomes "scheme://user:***@rest?password=***",
    // padded with NULs.
    std::string scrubbed = util::url_redacted(url);
    std::size_t length = std::strlen(url);
    if (scrubbed.size() <= length) {
      std::memcpy(url, scrubbed.c_str(), scrubbed.size());
      std::memset(url + scrubbed.size(), 0, length - scrubbed.size());
    } else {
      for (const util::PasswordSpan& secret : secrets) {
        std::memset(url + secret.offset, '*', secret.length); // too short to shrink
      }
    }
  }
  return found;
}

} // namespace dlock::cli
