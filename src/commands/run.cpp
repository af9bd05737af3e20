#include "commands/run.hpp"

#include "commands/acquire_wait.hpp"
#include "commands/supervisor.hpp"
#include "lock/watchdog.hpp"
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
  HeldLock(Context& context, const lock::LockName& name, std::string token, Millis ttl)
    : m_context(context), m_name(name), m_token(std::move(token)), m_ttl(ttl)
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
                          m_name.str(), error.what(), util::format_duration(m_ttl));
      } catch (...) {
      }
    }
  }
  // Compare-and-delete; true if we still held it. Throws the store's errors.
  bool release()
  {
    m_done = true;
    m_context.store.start_release(m_name, m_token);
    return lock::await_outcome(m_context.store, lock::Outcome::Op::release,
                               util::deadline_after(m_context.request_timeout)).held;
  }

private:
  Context& m_context;
  const lock::LockName& m_name;
  std::string m_token;
  Millis m_ttl;
  bool m_done = false;
};

// How `dlock run` ends: an exit status, or death by the signal that ended the command.
struct RunEnd {
  int status = 0;
  int die_of = 0;         // SIGINT or SIGQUIT: die of it, as the command did
  bool to_group = false;  // ...sending it to dlock's group first, as the terminal would have
};

RunEnd run_locked(Context& context, const RunOptions& options)
{
  const lock::LockName& name = options.key;
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT});
  // The guard is forked while the first attempt is in flight (the fork hides behind the
  // round trip), so that once the lock is ours only a message to it stands between the
  // acquisition and the command.
  std::optional<process::ProcessGroup> group;
  const std::string token = util::random_token();
  const lock::HolderInfo me = lock::HolderInfo::current(join(options.command));

  WaitPolicy wait_policy =
    make_wait_policy(options.no_wait, options.fair, options.wait, context.request_timeout);
  wait_policy.replicas = options.replicas;
  WaitOutcome outcome = acquire_with_wait(context, name, token, options.ttl, me, wait_policy,
                                          signals, [&] { group.emplace(signals.original_mask()); });
  if (outcome.signal != 0) {
    util::log_verbose("interrupted by signal {} while waiting for lock '{}'", outcome.signal,
                      name.str());
    // A Ctrl-C while waiting reached dlock's whole group already, the calling shell included.
    return RunEnd{128 + outcome.signal,
                  process::stops_calling_script(outcome.signal) ? outcome.signal : 0, false};
  }
  if (!outcome.acquired) {
    return RunEnd{options.conflict_exit_code};
  }
  if (!group) {
    group.emplace(signals.original_mask()); // not forked yet (never: the first attempt forks it)
  }
  util::log_verbose("acquired lock '{}' (fencing token {})", name.str(), outcome.fence);
  HeldLock held(context, name, token, options.ttl);

  lock::WatchdogPolicy policy;
  policy.lease.ttl = options.ttl;
  policy.lease.kill_after = options.kill_after.value_or(options.ttl / 4);
  policy.lease.request_limit = context.request_timeout + options.replicas.timeout; // WAIT's too
  policy.lease.drift = context.store.clock_drift(options.ttl);
  policy.replicas = options.replicas;
  policy.on_lost_ignore = options.on_lost_ignore;
  policy.max_hold = options.max_hold;

  process::CommandSpec spec;
  spec.argv = options.command;
  spec.env = {{"DLOCK_KEY", name.str()},
              {"DLOCK_TOKEN", token},
              {"DLOCK_FENCING_TOKEN", std::to_string(outcome.fence)},
              {"DLOCK_TTL_MS", std::to_string(outcome.validity.value_or(options.ttl).count())}};
  spec.env.insert(spec.env.end(), options.set_env.begin(), options.set_env.end());
  spec.unset = options.unset_env;
  CommandEnd end;
  context.store.limit_blocking(policy.lease.request_timeout());
  Supervisor supervisor(context.store, name, token,
                        lock::Watchdog(policy, outcome.sent_at, util::monotonic_now()), *group,
                        signals);
  try {
    supervisor.start(spec);
    end = supervisor.wait_for_exit();
  } catch (...) {
    group->kill_all(); // never release while any of the command may still run
    throw;
  }

  std::optional<bool> released;
  try {
    released = held.release();
  } catch (const Error& error) {
    util::log_warning("could not release lock '{}' ({}); it expires within {}", name.str(),
                      error.what(), util::format_duration(options.ttl));
  }
  if (released == true) {
    util::log_verbose("released lock '{}'", name.str());
  }
  lock::RunVerdict verdict = supervisor.watchdog().verdict(released);
  if (verdict.notice) {
    util::log_error("{}", lock::describe(*verdict.notice, name.str()));
  }
  if (verdict.exit_code) {
    return RunEnd{*verdict.exit_code};
  }
  if (process::stops_calling_script(end.signal)) {
    return RunEnd{end.status, end.signal, end.terminal_sent};
  }
  return RunEnd{end.status};
}

} // namespace

int run(Context& context, const RunOptions& options)
{
  RunEnd end = run_locked(context, options); // every lock, process and socket is gone after
  if (end.die_of != 0) {
    process::die_of_signal(end.die_of, end.to_group);
  }
  return end.status;
}

} // namespace dlock::commands
