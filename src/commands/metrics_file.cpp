#include "commands/metrics_file.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/files.hpp"
#include "util/log.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>

namespace dlock::commands {

namespace {

// The counters a file carries, by metric name.
constexpr const char* counters[] = {"dlock_runs_total", "dlock_skips_total", "dlock_losses_total",
                                    "dlock_errors_total"};

// A label value in the exposition format: '\', '"' and newlines escaped.
std::string label_value(std::string_view text)
{
  std::string out;
  for (char c : text) {
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

// Largest metrics file read back: a few hundred bytes are written; anything far larger was
// not written by dlock.
constexpr std::size_t max_metrics_file = 64 * 1024;

// The counters of the file name in dir (0 for those it lacks, or if there is none). A file
// that is not a regular one of at most max_metrics_file bytes (a symlink, a FIFO, /dev/zero
// planted by another user) counts from zero again, with a warning.
std::map<std::string, std::int64_t> read_counters(int dir, const std::string& name,
                                                  const std::string& shown)
{
  std::map<std::string, std::int64_t> values;
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
    return values;
  }
  std::istringstream input(*text);
  std::string line;
  while (std::getline(input, line)) {
    for (const char* counter : counters) {
      std::string prefix = std::string(counter) + "{";
      if (!line.starts_with(prefix)) {
        continue;
      }
      std::size_t space = line.rfind(' ');
      try {
        values[counter] = std::stoll(line.substr(space + 1));
      } catch (const std::exception&) {
        // a damaged line counts from zero again
      }
    }
  }
  return values;
}

// Takes the lock file's flock, waiting at most lock_patience: the file may be another user's
// (a shared directory), and a run's end must not hang on a lock someone else keeps.
bool lock_briefly(int fd)
{
  constexpr auto lock_patience = std::chrono::seconds(5);
  auto give_up = std::chrono::steady_clock::now() + lock_patience;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() >= give_up) {
      return false;
    }
    ::usleep(10'000);
  }
  return true;
}

std::string system_error(std::string_view what, const std::string& path)
{
  return fmt::format("{} '{}': {}", what, path, std::strerror(errno));
}

} // namespace

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

void write_run_metrics(const std::string& dir, const lock::LockName& key, const RunMetrics& run)
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
  if (!lock || !lock_briefly(lock.get())) {
    throw Error(ExitCode::internal, "{}",
                system_error("cannot lock metrics file", dir + "/" + lock_name));
  }
  std::map<std::string, std::int64_t> totals =
    read_counters(directory.get(), file, dir + "/" + file);
  totals["dlock_runs_total"] += 1;
  if (run.outcome == "skipped") {
    totals["dlock_skips_total"] += 1;
  } else if (run.outcome == "lost") {
    totals["dlock_losses_total"] += 1;
  } else if (run.outcome == "error") {
    totals["dlock_errors_total"] += 1;
  }

  const std::string labels = fmt::format("key=\"{}\"", label_value(key.str()));
  std::ostringstream out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  family("dlock_last_run_timestamp_seconds", "gauge", "When the last dlock run on the key ended.");
  out << fmt::format("dlock_last_run_timestamp_seconds{{{}}} {:.3f}\n", labels, run.ended_at);
  family("dlock_last_run_outcome", "gauge",
         "The last run's outcome: 1 for the one it had, 0 for the others.");
  for (const char* outcome : run_outcomes) {
    out << fmt::format("dlock_last_run_outcome{{{},outcome=\"{}\"}} {}\n", labels, outcome,
                       run.outcome == outcome ? 1 : 0);
  }
  family("dlock_last_run_exit_code", "gauge", "The exit status of the last dlock run.");
  out << fmt::format("dlock_last_run_exit_code{{{}}} {}\n", labels, run.exit_code);
  family("dlock_last_run_wait_seconds", "gauge", "How long the last run waited for the lock.");
  out << fmt::format("dlock_last_run_wait_seconds{{{}}} {:.3f}\n", labels, run.wait_seconds);
  family("dlock_last_run_hold_seconds", "gauge", "How long the last run held the lock.");
  out << fmt::format("dlock_last_run_hold_seconds{{{}}} {:.3f}\n", labels, run.hold_seconds);
  family("dlock_runs_total", "counter", "dlock runs on the key, whatever their outcome.");
  out << fmt::format("dlock_runs_total{{{}}} {}\n", labels, totals["dlock_runs_total"]);
  family("dlock_skips_total", "counter",
         "Runs that did not obtain the lock (-n, or --wait ran out).");
  out << fmt::format("dlock_skips_total{{{}}} {}\n", labels, totals["dlock_skips_total"]);
  family("dlock_losses_total", "counter", "Runs whose lease was lost while the command ran.");
  out << fmt::format("dlock_losses_total{{{}}} {}\n", labels, totals["dlock_losses_total"]);
  family("dlock_errors_total", "counter",
         "Runs ended by an error (store unavailable, refused, ...).");
  out << fmt::format("dlock_errors_total{{{}}} {}\n", labels, totals["dlock_errors_total"]);

  // Written aside under a random name the collector ignores, then renamed over: never read
  // half-written, and nothing another user planted in the directory is followed.
  if (int error = util::replace_file_at(directory.get(), file, out.str(), 0644); error != 0) {
    errno = error;
    throw Error(ExitCode::internal, "{}",
                system_error("cannot write metrics file", dir + "/" + file));
  }
}

} // namespace dlock::commands
