#include "commands/metrics_file.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/files.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

namespace dlock::commands {

namespace {

// The comment line that lists the runs of this host holding the key ("PID@ACQUIRED_AT" each),
// so that held stays 1 while any of them (a --shared or --limit lock) still holds it.
constexpr std::string_view holders_comment = "dlock holders:";
// Most holders a file lists: more than a semaphore's runs on one host would be.
constexpr std::size_t max_holders = 1000;

// Largest metrics file read back: a few kilobytes are written; anything far larger was
// not written by dlock.
constexpr std::size_t max_metrics_file = 64 * 1024;

// How long a write waits for the lock file that serializes it: at the run's end, seconds (the
// file may be another user's, and the end must not hang on it); at the acquisition, briefly,
// since the lease runs meanwhile.
constexpr auto end_patience = std::chrono::milliseconds(5000);
constexpr auto acquired_patience = std::chrono::milliseconds(200);

// A number as a metrics file holds it: finite, nothing else on the field.
std::optional<double> number_of(std::string_view text)
{
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// A run of this host that holds the key: its pid, and when it took the lock (as written).
struct FileHolder {
  pid_t pid = 0;
  std::string acquired_at;
};

// What a metrics file held: each sample's value by series, and the holders listed.
struct PreviousFile {
  std::map<std::string, std::string, std::less<>> values;
  std::vector<FileHolder> holders;

  std::int64_t counter(const std::string& series) const
  {
    auto found = values.find(series);
    std::int64_t value = 0;
    if (found != values.end()) {
      const std::string& text = found->second;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size() || value < 0) {
        value = 0; // a damaged line counts from zero again
      }
    }
    return value;
  }
};

// The holders of a holders_comment line ("PID@SECONDS ..."); a malformed entry is skipped.
std::vector<FileHolder> parse_holders(std::string_view text)
{
  std::vector<FileHolder> holders;
  std::istringstream words{std::string(text)};
  std::string word;
  while (words >> word && holders.size() < max_holders) {
    std::size_t at = word.find('@');
    if (at == std::string::npos || !number_of(std::string_view(word).substr(at + 1))) {
      continue;
    }
    pid_t pid = 0;
    auto [end, error] = std::from_chars(word.data(), word.data() + at, pid);
    if (error == std::errc() && end == word.data() + at && pid > 0) {
      holders.push_back({pid, word.substr(at + 1)});
    }
  }
  return holders;
}

// The file name in dir as it was (empty if there is none). A file that is not a regular one
// of at most max_metrics_file bytes (a symlink, a FIFO, /dev/zero planted by another user)
// counts from zero again, with a warning.
PreviousFile read_previous(int dir, const std::string& name, const std::string& shown)
{
  PreviousFile previous;
  util::UniqueFd fd = util::open_regular_at(dir, name, O_RDONLY);
  std::optional<std::string> text;
  if (fd) {
    text = util::read_bounded(fd.get(), max_metrics_file);
  }
  if (!text) {
    if (errno != ENOENT) {
      util::log_warning("metrics file '{}' cannot be read back ({}): its counters start from zero",
                        shown, std::strerror(errno));
    }
    return previous;
  }
  std::istringstream input(*text);
  std::string line;
  while (std::getline(input, line)) {
    if (line.starts_with("# ")) {
      std::string_view comment = std::string_view(line).substr(2);
      if (comment.starts_with(holders_comment)) {
        previous.holders = parse_holders(comment.substr(holders_comment.size()));
      }
      continue;
    }
    std::size_t space = line.rfind(' ');
    if (space != std::string::npos && number_of(std::string_view(line).substr(space + 1))) {
      previous.values[line.substr(0, space)] = line.substr(space + 1);
    }
  }
  return previous;
}

// Takes the lock file's flock, waiting at most patience: the file may be another user's (a
// shared directory), and a run must not hang on a lock someone else keeps.
bool lock_briefly(int fd, std::chrono::milliseconds patience)
{
  auto give_up = std::chrono::steady_clock::now() + patience;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() >= give_up) {
      return false;
    }
    ::usleep(2'000);
  }
  return true;
}

std::string system_error(std::string_view what, const std::string& path)
{
  return fmt::format("{} '{}': {}", what, path, std::strerror(errno));
}

// The last run's families, in the order written: name, type, help.
struct Family {
  const char* name;
  const char* help;
};
constexpr Family last_run_families[] = {
  {"dlock_last_run_timestamp_seconds", "When the last dlock run on the key ended."},
  {"dlock_last_run_outcome", "The last run's outcome: 1 for the one it had, 0 for the others."},
  {"dlock_last_run_exit_code", "The exit status of the last dlock run."},
  {"dlock_last_run_wait_seconds", "How long the last run waited for the lock."},
  {"dlock_last_run_hold_seconds", "How long the last run held the lock."},
};
constexpr Family counter_families[] = {
  {"dlock_runs_total", "dlock runs on the key, whatever their outcome."},
  {"dlock_skips_total", "Runs that did not obtain the lock (-n, or --wait ran out)."},
  {"dlock_losses_total", "Runs whose lease was lost while the command ran."},
  {"dlock_errors_total", "Runs ended by an error (store unavailable, refused, ...)."},
};

std::string seconds_text(double seconds) { return fmt::format("{:.3f}", seconds); }

// The samples of the last run's family, series and value: from run when it has just ended,
// else those of the previous file (carried on while a run holds the lock).
std::vector<std::pair<std::string, std::string>> last_run_samples(const Family& family,
                                                                  const std::string& labels,
                                                                  const RunMetrics* run,
                                                                  const PreviousFile& previous)
{
  std::vector<std::pair<std::string, std::string>> samples;
  std::string_view name = family.name;
  auto add = [&](const std::string& series, const std::string& value) {
    if (run != nullptr) {
      samples.emplace_back(series, value);
    } else if (auto found = previous.values.find(series); found != previous.values.end()) {
      samples.emplace_back(series, found->second);
    }
  };
  if (name == "dlock_last_run_outcome") {
    for (const char* outcome : run_outcomes) {
      add(PrometheusText::series(name, fmt::format("{},outcome=\"{}\"", labels, outcome)),
          run != nullptr && run->outcome == outcome ? "1" : "0");
    }
    return samples;
  }
  std::string value;
  if (run != nullptr) {
    value = name == "dlock_last_run_timestamp_seconds" ? seconds_text(run->ended_at)
            : name == "dlock_last_run_exit_code"       ? std::to_string(run->exit_code)
            : name == "dlock_last_run_wait_seconds"    ? seconds_text(run->wait_seconds)
                                                       : seconds_text(run->hold_seconds);
  }
  add(PrometheusText::series(name, labels), value);
  return samples;
}

// One write of key's file: what this run says (acquired_at: it took the lock then; run: it
// ended so), with the rest carried on from the file it replaces.
void update_metrics(const std::string& dir, const lock::LockName& key,
                    std::optional<double> acquired_at, const RunMetrics* run)
{
  const std::string file = metrics_file_name(key);
  const std::string lock_name = "." + file.substr(0, file.size() - 5) + ".lock";
  util::UniqueFd directory = util::open_directory(dir);
  if (!directory) {
    throw Error(ExitCode::internal, "{}", system_error("cannot open metrics directory", dir));
  }
  // O_CREAT on another user's file in a sticky directory is refused (protected_regular), but
  // reading it is enough to flock it.
  util::UniqueFd lock = util::open_regular_at(directory.get(), lock_name, O_RDONLY | O_CREAT, 0644);
  if (!lock && errno == EACCES) {
    lock = util::open_regular_at(directory.get(), lock_name, O_RDONLY);
  }
  if (!lock || !lock_briefly(lock.get(), acquired_at ? acquired_patience : end_patience)) {
    throw Error(ExitCode::internal, "{}",
                system_error("cannot lock metrics file", dir + "/" + lock_name));
  }
  PreviousFile previous = read_previous(directory.get(), file, dir + "/" + file);

  // This host's holders: those still alive (a run killed outright is dropped by the next
  // write), less this run, plus this run if it has just taken the lock.
  std::vector<FileHolder> holders;
  const pid_t self = ::getpid();
  for (const FileHolder& holder : previous.holders) {
    if (holder.pid != self && (::kill(holder.pid, 0) == 0 || errno != ESRCH)) {
      holders.push_back(holder);
    }
  }
  if (acquired_at) {
    holders.push_back({self, seconds_text(*acquired_at)});
  }

  const std::string labels = fmt::format("key=\"{}\"", PrometheusText::label_value(key.str()));
  const std::string series = PrometheusText::series("", labels);
  PrometheusText out;
  out.family("dlock_run_held", "gauge",
             "Whether a dlock run of this host holds the lock now (1) or not (0).");
  out.sample("dlock_run_held" + series, holders.empty() ? "0" : "1");
  if (!holders.empty()) {
    auto first = std::min_element(holders.begin(), holders.end(), [](const auto& a, const auto& b) {
      return number_of(a.acquired_at) < number_of(b.acquired_at);
    });
    out.family("dlock_run_acquired_timestamp_seconds", "gauge",
               "When the run of this host that holds the lock took it (only while held).");
    out.sample("dlock_run_acquired_timestamp_seconds" + series, first->acquired_at);
  }
  for (const Family& family : last_run_families) {
    out.family(family.name, "gauge", family.help);
    for (const auto& [name, value] : last_run_samples(family, labels, run, previous)) {
      out.sample(name, value);
    }
  }
  for (const Family& family : counter_families) {
    std::string name = family.name + series;
    std::int64_t total = previous.counter(name);
    std::string_view counter = family.name;
    if (run != nullptr
        && (counter == "dlock_runs_total"
            || (counter == "dlock_skips_total" && run->outcome == "skipped")
            || (counter == "dlock_losses_total" && run->outcome == "lost")
            || (counter == "dlock_errors_total" && run->outcome == "error"))) {
      ++total;
    }
    out.family(family.name, "counter", family.help);
    out.sample(name, std::to_string(total));
  }
  if (!holders.empty()) {
    std::string list(holders_comment);
    for (const FileHolder& holder : holders) {
      list += fmt::format(" {}@{}", holder.pid, holder.acquired_at);
    }
    out.comment(list);
  }

  // Written aside under a random name the collector ignores, then renamed over: never read
  // half-written, and nothing another user planted in the directory is followed.
  if (int error = util::replace_file_at(directory.get(), file, out.str(), 0644); error != 0) {
    errno = error;
    throw Error(ExitCode::internal, "{}",
                system_error("cannot write metrics file", dir + "/" + file));
  }
}

} // namespace

std::string PrometheusText::label_value(std::string_view text)
{
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    char c = text[i];
    if (static_cast<unsigned char>(c) >= 0x80) {
      std::size_t length = util::utf8_char_length(text.substr(i));
      out += length == 0 ? "\xef\xbf\xbd" : std::string(text.substr(i, length)); // U+FFFD
      i += length == 0 ? 1 : length;
      continue;
    }
    ++i;
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PrometheusText::series(std::string_view name, std::string_view labels)
{
  return fmt::format("{}{{{}}}", name, labels);
}

void PrometheusText::family(std::string_view name, std::string_view type, std::string_view help)
{
  std::string escaped; // HELP's escaping: '\' and newline
  for (char c : help) {
    escaped += c == '\\' ? "\\\\" : c == '\n' ? "\\n" : std::string(1, c);
  }
  m_header = fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escaped, name, type);
}

void PrometheusText::sample(std::string_view series, std::string_view value)
{
  m_text += m_header;
  m_header.clear();
  m_text += fmt::format("{} {}\n", series, value);
}

void PrometheusText::comment(std::string_view text) { m_text += fmt::format("# {}\n", text); }

std::string metrics_file_name(const lock::LockName& key)
{
  const std::string& name = key.str();
  std::string safe;
  bool replaced = false;
  for (char c : name) {
    bool kept = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                || c == '_' || c == '-' || c == '.';
    safe += kept ? c : '_';
    replaced = replaced || !kept;
  }
  if (replaced || safe.size() > 100) {
    std::uint64_t hash = 14695981039346656037ull; // FNV-1a
    for (unsigned char c : name) {
      hash = (hash ^ c) * 1099511628211ull;
    }
    safe = fmt::format("{}-{:016x}", safe.substr(0, 100), hash);
  }
  return "dlock_" + safe + ".prom";
}

void write_acquired_metrics(const std::string& dir, const lock::LockName& key, double acquired_at)
{
  update_metrics(dir, key, acquired_at, nullptr);
}

void write_run_metrics(const std::string& dir, const lock::LockName& key, const RunMetrics& run)
{
  update_metrics(dir, key, std::nullopt, &run);
}

} // namespace dlock::commands
