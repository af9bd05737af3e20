#include "commands/metrics_file.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
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

// The counters of the file at path (0 for those it lacks, or if there is none).
std::map<std::string, std::int64_t> read_counters(const std::string& path)
{
  std::map<std::string, std::int64_t> values;
  std::ifstream input(path);
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
    bool kept = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'
                || c == '-' || c == '.';
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
  const std::string path = dir + "/" + file;
  const std::string lock_path = dir + "/." + file.substr(0, file.size() - 5) + ".lock";
  util::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock || ::flock(lock.get(), LOCK_EX) != 0) {
    throw Error(ExitCode::internal, "{}", system_error("cannot lock metrics file", lock_path));
  }
  std::map<std::string, std::int64_t> totals = read_counters(path);
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
  family("dlock_skips_total", "counter", "Runs that did not obtain the lock (-n, or --wait ran out).");
  out << fmt::format("dlock_skips_total{{{}}} {}\n", labels, totals["dlock_skips_total"]);
  family("dlock_losses_total", "counter", "Runs whose lease was lost while the command ran.");
  out << fmt::format("dlock_losses_total{{{}}} {}\n", labels, totals["dlock_losses_total"]);
  family("dlock_errors_total", "counter", "Runs ended by an error (store unavailable, refused, ...).");
  out << fmt::format("dlock_errors_total{{{}}} {}\n", labels, totals["dlock_errors_total"]);

  // Written aside (a name the collector ignores), then renamed over: never read half-written.
  const std::string temporary = fmt::format("{}/.{}.{}.tmp", dir, file, ::getpid());
  const std::string text = out.str();
  util::UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) {
    throw Error(ExitCode::internal, "{}", system_error("cannot write metrics file", temporary));
  }
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())
      || ::fsync(fd.get()) != 0 || ::rename(temporary.c_str(), path.c_str()) != 0) {
    std::string error = system_error("cannot write metrics file", path);
    ::unlink(temporary.c_str());
    throw Error(ExitCode::internal, "{}", error);
  }
}

} // namespace dlock::commands
