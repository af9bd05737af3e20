#include "commands/run.hpp"

#include "commands/acquire_wait.hpp"
#include "commands/supervisor.hpp"
#include "lock/client.hpp"
#include "lock/lease.hpp"
#include "process/child.hpp"
#include "process/signals.hpp"
#include "util/log.hpp"
#include "util/random.hpp"

namespace dlock::commands {

using util::Millis;

namespace {

std::string join(const std::vector<std::string>& words)
{
  std::string line;
  for (const auto& word : words) {
    if (!line.empty()) {
      line.push_back(' ');
    }
    line += word;
  }
  return line;
}

// Releases the lock on the way out of any path that does not release it explicitly.
class HeldLock {
public:
  HeldLock(lock::LockClient& client, std::string token, Millis ttl, Millis timeout)
    : m_client(client), m_token(std::move(token)), m_ttl(ttl), m_timeout(timeout)
  {
  }
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
  ~HeldLock() noexcept
  {
    if (!m_done) {
      try {
        release();
      } catch (const Error& error) {
        util::log_warning("could not release lock '{}' ({}); it expires within {}",
                          m_client.keys().name, error.what(), util::format_duration(m_ttl));
      } catch (...) {
      }
    }
  }
  // Compare-and-delete; true if we still held it. Throws on Redis errors.
  bool release()
  {
    m_done = true;
    return m_client.release(m_token, util::deadline_after(m_timeout));
  }

private:
  lock::LockClient& m_client;
  std::string m_token;
  Millis m_ttl;
  Millis m_timeout;
  bool m_done = false;
};

// How `dlock run` ends: an exit status, or death by the signal that ended the command.
struct RunEnd {
  int status = 0;
  int die_of = 0;         // SIGINT or SIGQUIT: die of it, as the command did
  bool to_group = false;  // ...sending it to dlock's group first, as the terminal would have
};

RunEnd run_locked(const cli::GlobalOptions& global, const cli::RunOptions& options)
{
  lock::validate_lock_name(options.key);
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT});
  // The guard is forked now, while nothing is at stake, so that once the lock is ours only a
  // message to it stands between the acquisition and the command.
  process::ProcessGroup group(signals.original_mask());
  redis::Connection connection(global.connect);
  lock::LockClient client(connection, lock::LockKeys::make(global.prefix, options.key));
  const std::string token = util::random_token();
  const lock::HolderInfo me = lock::HolderInfo::current(join(options.command));
  const Millis request_timeout = global.connect.connect_timeout;

  WaitPolicy wait_policy =
    make_wait_policy(options.no_wait, options.fair, options.wait, request_timeout);
  WaitOutcome outcome = acquire_with_wait(client, token, options.ttl, me, wait_policy, signals);
  if (outcome.signal != 0) {
    util::log_verbose("interrupted by signal {} while waiting for lock '{}'", outcome.signal,
                      options.key);
    // A Ctrl-C while waiting reached dlock's whole group already, the calling shell included.
    return RunEnd{128 + outcome.signal, process::stops_calling_script(outcome.signal) ? outcome.signal : 0, false};
  }
  if (!outcome.acquired) {
    return RunEnd{options.conflict_exit_code};
  }
  util::log_verbose("acquired lock '{}' (fencing token {})", options.key, outcome.fence);
  HeldLock held(client, token, options.ttl, request_timeout);

  lock::LeasePolicy policy;
  policy.ttl = options.ttl;
  policy.kill_after = options.kill_after.value_or(options.ttl / 4);
  policy.request_limit = request_timeout;
  lock::Lease lease(policy, outcome.sent_at);

  process::CommandSpec spec;
  spec.argv = options.command;
  spec.env = {{"DLOCK_KEY", options.key},
              {"DLOCK_TOKEN", token},
              {"DLOCK_FENCING_TOKEN", std::to_string(outcome.fence)},
              {"DLOCK_TTL_MS", std::to_string(options.ttl.count())}};
  if (!options.export_password) {
    const cli::EnvironmentChanges& hide = global.hide_password;
    spec.env.insert(spec.env.end(), hide.set.begin(), hide.set.end());
    spec.unset = hide.unset;
  }
  CommandEnd end;
  connection.limit_blocking(policy.request_timeout());
  Supervisor supervisor(client, options, token, lease, group, signals);
  try {
    group.spawn(spec);
    supervisor.arm();
    end = supervisor.wait_for_exit();
  } catch (...) {
    group.kill_all(); // never release while any of the command may still run
    throw;
  }

  bool stopped_for_loss = supervisor.stop_reason() == StopReason::lost
                          || supervisor.stop_reason() == StopReason::unconfirmed;
  bool released = false;
  bool gone_at_release = false;
  try {
    released = held.release();
    gone_at_release = !released;
  } catch (const Error& error) {
    util::log_warning("could not release lock '{}' ({}); it expires within {}", options.key,
                      error.what(), util::format_duration(options.ttl));
  }
  if (released) {
    util::log_verbose("released lock '{}'", options.key);
  }
  if (gone_at_release && !stopped_for_loss && !supervisor.ran_unprotected()) {
    util::log_error("lock '{}' had already been lost when the command ended (it expired or was "
                    "released by someone else)",
                    options.key);
  }
  // A confirmed release proves the lease never lapsed, even if renewals went unanswered.
  bool unprotected = supervisor.ran_unprotected() && !released;
  if (stopped_for_loss || gone_at_release || unprotected) {
    return RunEnd{static_cast<int>(ExitCode::lost)};
  }
  if (supervisor.stop_reason() == StopReason::max_hold) {
    return RunEnd{static_cast<int>(ExitCode::max_hold)};
  }
  if (process::stops_calling_script(end.signal)) {
    return RunEnd{end.status, end.signal, end.terminal_sent};
  }
  return RunEnd{end.status};
}

} // namespace

int run(const cli::GlobalOptions& global, const cli::RunOptions& options)
{
  RunEnd end = run_locked(global, options); // every lock, process and socket is gone after
  if (end.die_of != 0) {
    process::die_of_signal(end.die_of, end.to_group);
  }
  return end.status;
}

} // namespace dlock::commands
