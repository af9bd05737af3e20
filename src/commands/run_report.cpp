#include "commands/run_report.hpp"

#include "commands/history.hpp"
#include "commands/metrics_file.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/syslog.hpp"

#include <algorithm>
#include <chrono>

namespace dlock::commands {

namespace {

using util::EventField;
using util::EventLevel;

std::string ms_between(util::TimePoint from, util::TimePoint to)
{
  return std::to_string(std::chrono::duration_cast<util::Millis>(to - from).count());
}

double seconds_between(util::TimePoint from, util::TimePoint to)
{
  return std::chrono::duration<double>(to - from).count();
}

std::int64_t ms_count(util::TimePoint from, util::TimePoint to)
{
  return std::chrono::duration_cast<util::Millis>(to - from).count();
}

double unix_seconds_now()
{
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

} // namespace

RunReport::RunReport(const std::vector<lock::LockName>& keys, lock::LockKind kind, util::Millis ttl,
                     std::optional<std::string> metrics_dir, lock::Store& store,
                     util::Millis request_timeout)
  : m_keys(keys), m_kind(kind), m_ttl(ttl), m_metrics_dir(std::move(metrics_dir)), m_store(store),
    m_request_timeout(request_timeout), m_started(util::monotonic_now())
{
}

std::string RunReport::key_text() const { return lock::join_names(m_keys); }

std::string RunReport::fence_text() const
{
  std::string text;
  for (std::int64_t fence : m_fences) {
    text += (text.empty() ? "" : " ") + std::to_string(fence);
  }
  // token 0: a store without fencing (a database without dlock_fence)
  bool none = std::all_of(m_fences.begin(), m_fences.end(), [](std::int64_t f) { return f == 0; });
  return none ? "none" : text;
}

void RunReport::acquired(const lock::HolderInfo& holder, const std::vector<std::int64_t>& fences)
{
  m_acquired_at = util::monotonic_now();
  m_fences = fences;
  m_outcome = "ran";
  std::vector<EventField> fields{{"key", key_text()},
                                 {"kind", m_kind.code()},
                                 {"holder", holder.identity()},
                                 {"fencing_token", fence_text()},
                                 {"ttl_ms", std::to_string(m_ttl.count())},
                                 {"waited_ms", ms_between(m_started, *m_acquired_at)}};
  if (!holder.note.empty()) {
    fields.push_back({"note", holder.note});
  }
  util::syslog_event(EventLevel::info, "acquired", fields);

  m_holder = holder;
  m_holder.fence = fences.empty() ? 0 : fences.front();
  lock::HistoryEvent event = lock::HistoryEvent::now(lock::HistoryEvent::Kind::acquired, m_holder);
  event.waited_ms = ms_count(m_started, *m_acquired_at);
  record_event(m_store, m_keys, event, std::nullopt); // its answer is not waited for
  if (m_metrics_dir) {
    // held 1 from now, so that an alert on a lock held too long works while the command runs
    for (const lock::LockName& key : m_keys) {
      try {
        write_acquired_metrics(*m_metrics_dir, key, unix_seconds_now());
      } catch (const Error& error) {
        util::log_warning("{}", error.what());
        break;
      }
    }
  }
}

void RunReport::skipped(const lock::HolderInfo& holder, const std::string& held_by,
                        std::string_view reason)
{
  m_outcome = "skipped";
  util::TimePoint now = util::monotonic_now();
  util::syslog_event(EventLevel::notice, "skipped",
                     {{"key", key_text()},
                      {"reason", std::string(reason)},
                      {"held_by", held_by},
                      {"waited_ms", ms_between(m_started, now)}});
  lock::HistoryEvent event = lock::HistoryEvent::now(lock::HistoryEvent::Kind::skipped, holder);
  event.waited_ms = ms_count(m_started, now);
  event.detail = fmt::format("{}; held by {}", reason, held_by.empty() ? "?" : held_by);
  record_event(m_store, m_keys, event, util::deadline_after(m_request_timeout));
}

void RunReport::interrupted(int signal)
{
  m_outcome = "interrupted";
  util::syslog_event(EventLevel::notice, "interrupted",
                     {{"key", key_text()},
                      {"signal", std::to_string(signal)},
                      {"waited_ms", ms_between(m_started, util::monotonic_now())}});
}

void RunReport::lost(const std::string& why, bool replaced)
{
  m_outcome = "lost";
  m_loss = why;
  m_replaced = replaced;
  util::syslog_event(
    EventLevel::warning, "lost",
    {{"key", key_text()},
     {"fencing_token", fence_text()},
     {"held_ms", ms_between(m_acquired_at.value_or(m_started), util::monotonic_now())},
     {"reason", why}});
}

void RunReport::released(std::optional<bool> released, int command_status)
{
  m_released_at = util::monotonic_now();
  m_release_answered = released.has_value();
  std::string held_ms = ms_between(m_acquired_at.value_or(m_started), *m_released_at);
  if (released == true) {
    util::syslog_event(EventLevel::info, "released",
                       {{"key", key_text()},
                        {"fencing_token", fence_text()},
                        {"held_ms", held_ms},
                        {"status", std::to_string(command_status)}});
  } else {
    util::syslog_event(EventLevel::warning, "release_failed",
                       {{"key", key_text()},
                        {"fencing_token", fence_text()},
                        {"held_ms", held_ms},
                        {"status", std::to_string(command_status)},
                        {"reason", released ? "no longer held" : "the store did not answer"}});
  }
}

void RunReport::finished(int exit_status)
{
  record_end(exit_status);
  write_metrics(exit_status);
}

void RunReport::record_end(int exit_status)
{
  // Not acquired: the skip said it. No answer to the release: the store is not answering.
  if (!m_acquired_at || !m_release_answered) {
    return;
  }
  using Kind = lock::HistoryEvent::Kind;
  lock::HistoryEvent event = lock::HistoryEvent::now(m_replaced            ? Kind::replaced
                                                     : m_outcome == "lost" ? Kind::lost
                                                                           : Kind::released,
                                                     m_holder);
  event.held_ms = ms_count(*m_acquired_at, m_released_at.value_or(util::monotonic_now()));
  event.exit_status = exit_status;
  event.detail = m_loss;
  record_event(m_store, m_keys, event, util::deadline_after(m_request_timeout));
}

void RunReport::failed(int exit_status, const std::string& error)
{
  if (m_finished) {
    return;
  }
  m_outcome = "error";
  util::syslog_event(
    EventLevel::warning, "error",
    {{"key", key_text()}, {"status", std::to_string(exit_status)}, {"reason", error}});
  write_metrics(exit_status);
}

void RunReport::write_metrics(int exit_status)
{
  m_finished = true;
  if (!m_metrics_dir) {
    return;
  }
  util::TimePoint now = util::monotonic_now();
  RunMetrics run;
  run.outcome = m_outcome;
  run.exit_code = exit_status;
  run.wait_seconds = seconds_between(m_started, m_acquired_at.value_or(now));
  run.hold_seconds =
    m_acquired_at ? seconds_between(*m_acquired_at, m_released_at.value_or(now)) : 0;
  run.ended_at = unix_seconds_now();
  for (const lock::LockName& key : m_keys) {
    try {
      write_run_metrics(*m_metrics_dir, key, run);
    } catch (const Error& error) {
      util::log_warning("{}", error.what());
      return;
    }
  }
}

} // namespace dlock::commands
