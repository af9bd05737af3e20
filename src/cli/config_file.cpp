#include "cli/config_file.hpp"

#include "util/duration.hpp"
#include "util/error.hpp"
#include "util/files.hpp"
#include "util/log.hpp"
#include "util/url.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <sstream>

namespace dlock::cli {

namespace {

// Largest config file read: a few dozen lines are usual.
constexpr std::size_t max_config_file = 1024 * 1024;

std::string_view trimmed(std::string_view text)
{
  constexpr std::string_view blanks = " \t\r";
  std::size_t start = text.find_first_not_of(blanks);
  if (start == std::string_view::npos) {
    return {};
  }
  return text.substr(start, text.find_last_not_of(blanks) - start + 1);
}

// The line without a trailing comment: a '#' after a blank, outside quotes (so that a
// Sentinel URL's "#MASTER" stays). CLI11's reader would cut at any '#'; its own comment
// character is switched off below.
std::string without_comment(const std::string& line)
{
  char quote = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quote != 0) {
      quote = c == quote ? 0 : quote;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
      return line.substr(0, i);
    }
  }
  return line;
}

// Where each setting of a file was written: the lines of each (section, name), in order, as
// CLI11's reader meets them (a line without '=' is a setting named by the whole line).
class LineIndex {
public:
  void add(const std::string& section, std::string name, int line)
  {
    m_lines[{section, std::move(name)}].push_back(line);
  }
  // The next line of (section, name), or 0 if unknown.
  int take(const std::string& section, const std::string& name)
  {
    auto found = m_lines.find({section, name});
    if (found == m_lines.end() || found->second.empty()) {
      return 0;
    }
    int line = found->second.front();
    found->second.pop_front();
    return line;
  }

private:
  std::map<std::pair<std::string, std::string>, std::deque<int>> m_lines;
};

// The environment variables that set an option dlock reads outside CLI11 (see
// resolve_global): a file's setting of it gives way to them.
bool set_by_environment(const std::string& section, const std::string& name)
{
  auto any_set = [](std::initializer_list<const char*> names) {
    for (const char* variable : names) {
      const char* value = std::getenv(variable);
      if (value != nullptr && *value != '\0') {
        return true;
      }
    }
    return false;
  };
  if (!section.empty()) {
    return false;
  }
  if (name == "url") {
    return any_set({"DLOCK_URL"});
  }
  if (name == "password-file") {
    return any_set({"DLOCK_PASSWORD", "DLOCK_PASSWORD_FILE"});
  }
  if (name == "sentinel-password-file") {
    return any_set({"DLOCK_SENTINEL_PASSWORD", "DLOCK_SENTINEL_PASSWORD_FILE"});
  }
  return false;
}

// Warns once per file that holds a password others may read.
void check_password_exposure(const ConfigFile& file, const struct stat& st)
{
  bool password = false;
  for (const ConfigSetting& setting : file.settings) {
    if (setting.name == "url") {
      for (const std::string& value : setting.values) {
        password = password || util::url_has_password(value);
      }
    }
  }
  if (password && (st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
    util::log_warning("config file '{}' holds a password and other users can read it (mode {:o}); "
                      "chmod 600 it, or use password-file",
                      file.path, st.st_mode & 07777);
  }
}

} // namespace

std::vector<std::string> config_paths(const std::optional<std::string>& given)
{
  if (given) {
    if (given->empty()) {
      return {}; // --config '': no config file at all
    }
    return {*given};
  }
  std::vector<std::string> candidates;
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  if (xdg != nullptr && *xdg == '/') {
    candidates.push_back(std::string(xdg) + "/dlock/dlock.conf");
  } else if (home != nullptr && *home == '/') {
    candidates.push_back(std::string(home) + "/.config/dlock/dlock.conf");
  }
  const char* system = std::getenv("DLOCK_SYSTEM_CONFIG");
  candidates.emplace_back(system != nullptr && *system != '\0' ? system : "/etc/dlock/dlock.conf");
  std::vector<std::string> paths;
  for (std::string& candidate : candidates) {
    std::error_code ignored;
    if (std::filesystem::exists(candidate, ignored)) {
      paths.push_back(std::move(candidate));
    }
  }
  return paths;
}

ConfigFile read_config_file(const std::string& path)
{
  // Followed if a symlink (configuration management links them), never blocking on a FIFO;
  // then it must be a regular file that only root or the caller could have written, as ssh
  // requires of its configuration: the file chooses the store, the password file, the TLS keys.
  util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) {
    throw Error(ExitCode::config, "cannot read config file '{}': {}", path, std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    throw Error(ExitCode::config, "config file '{}' is a directory", path);
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error(ExitCode::config, "config file '{}' is not a regular file", path);
  }
  if (std::optional<std::string> why = util::untrusted_because(st)) {
    throw Error(ExitCode::config, "config file '{}' is refused: {}", path, *why);
  }
  std::optional<std::string> text_read = util::read_bounded(fd.get(), max_config_file);
  if (!text_read) {
    throw Error(ExitCode::config, "cannot read config file '{}': {}", path,
                errno == EFBIG ? fmt::format("larger than {} KiB", max_config_file / 1024)
                               : std::strerror(errno));
  }
  std::istringstream input(*text_read);
  // Comments out, and where each setting is, before CLI11 reads the rest.
  std::string text;
  LineIndex index;
  std::string section;
  std::string raw;
  for (int number = 1; std::getline(input, raw); ++number) {
    std::string line = without_comment(raw);
    std::string_view content = trimmed(line);
    text += line;
    text += '\n';
    if (content.empty() || content.front() == ';' || content.front() == '#') {
      continue;
    }
    if (content.front() == '[' && content.back() == ']'
        && content.find('=') == std::string_view::npos) {
      section = std::string(trimmed(content.substr(1, content.size() - 2)));
      continue;
    }
    std::size_t equals = content.find('=');
    index.add(section, std::string(trimmed(content.substr(0, equals))), number);
  }

  CLI::ConfigTOML reader;
  reader.comment('\0'); // comments are gone already; a '#' left is part of a value
  std::istringstream stream(text);
  std::vector<CLI::ConfigItem> items;
  try {
    items = reader.from_config(stream);
  } catch (const CLI::Error& error) {
    throw Error(ExitCode::config, "config file '{}': {}", path, error.what());
  }
  ConfigFile file{path, {}};
  for (CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") { // where a section starts and ends
      continue;
    }
    std::string item_section;
    for (const std::string& parent : item.parents) {
      item_section += (item_section.empty() ? "" : ".") + parent;
    }
    if (item_section == "default") {
      item_section.clear();
    }
    int line = index.take(item_section, item.name);
    std::string where = line > 0 ? fmt::format("{}:{}", path, line) : path;
    file.settings.push_back(ConfigSetting{item_section, item.name, std::move(item.inputs), where});
  }
  check_password_exposure(file, st);
  return file;
}

void apply_config(const std::vector<ConfigFile>& files, const std::vector<ConfigTarget>& targets)
{
  for (const ConfigFile& file : files) {
    for (const ConfigSetting& setting : file.settings) {
      const ConfigTarget* target = nullptr;
      for (const ConfigTarget& candidate : targets) {
        if (candidate.section == setting.section) {
          target = &candidate;
        }
      }
      if (target == nullptr) {
        throw Error(ExitCode::config,
                    "{}: no section [{}] (global options go at the top, run's under [run])",
                    setting.where, setting.section);
      }
      const std::string& name = setting.name;
      if (name == "help" || name == "version" || name == "config" || name == "command") {
        throw Error(ExitCode::config, "{}: {} cannot be set in a config file", setting.where, name);
      }
      if (target->app == nullptr) {
        continue; // a section of another subcommand: checked, not used
      }
      CLI::Option* option = name.empty() || name.front() == '-'
                              ? nullptr
                              : target->app->get_option_no_throw("--" + name);
      if (option == nullptr) {
        throw Error(ExitCode::config, "{}: '{}' is not an option of {}", setting.where, name,
                    setting.section.empty() ? "dlock (global options)"
                                            : "dlock " + setting.section);
      }
      if (option->count() > 0 || set_by_environment(setting.section, name)) {
        continue; // the command line, the environment or a file read first set it
      }
      if (option->get_type_name().starts_with("D") || option->get_type_name().starts_with("[D]")) {
        for (const std::string& value : setting.values) {
          try {
            util::parse_duration(value, "--" + name);
          } catch (const Error& error) {
            throw Error(ExitCode::config, "{}: {}", setting.where, error.what());
          }
        }
      }
      try {
        option->add_result(setting.values);
        option->run_callback();
      } catch (const CLI::Error& error) {
        throw Error(ExitCode::config, "{}: {}", setting.where, error.what());
      }
    }
  }
}

} // namespace dlock::cli
