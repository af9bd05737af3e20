#include "commands/run.hpp"

#include "commands/run_report.hpp"
#include "commands/supervisor.hpp"
#include "hold/acquisition.hpp"
#include "lock/watchdog.hpp"
#include "process/child.hpp"
#include "process/signals.hpp"
#include "util/log.hpp"
#include "util/random.hpp"

#include <algorithm>

namespace dlock::commands {

using util::Millis;

namespace {

// Fencing tokens separated by spaces, as DLOCK_FENCING_TOKENS shows them.
std::string join_numbers(const std::vector<std::int64_t>& numbers)
{
  std::string line;
  for (std::int64_t number : numbers) {
    line += line.empty() ? std::to_string(number) : " " + std::to_string(number);
  }
  return line;
}

// Releases the lock (every key of it) on the way out of any path that does not release it
// explicitly.
class HeldLock {
public:
  HeldLock(Context& context, const std::vector<lock::LockName>& names, std::string token,
           Millis ttl)
    : m_context(context), m_names(names), m_token(std::move(token)), m_ttl(ttl)
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
        util::log_warning("could not release lock '{}' ({}); {}", lock::join_names(m_names),
                          error.what(), m_context.store.traits().left_behind_after(m_ttl));
      } catch (...) {
      }
    }
  }
  // Compare-and-delete; true if we still held every key. Throws the store's errors.
  bool release()
  {
    m_done = true;
    return hold::release_all(m_context.store, m_names, m_token, m_context.request_timeout);
  }

private:
  Context& m_context;
  const std::vector<lock::LockName>& m_names;
  std::string m_token;
  Millis m_ttl;
  bool m_done = false;
};

// The command's environment besides DLOCK_*: the store's password kept from it.
process::CommandSpec command_spec(const RunOptions& options)
{
  process::CommandSpec spec;
  spec.argv = options.command;
  spec.env = options.set_env;
  spec.unset = options.unset_env;
  return spec;
}

// Whether dlock runs inside a command that holds every key asked for already (a nested run):
// the DLOCK_TOKEN it was given must hold each key, which a renewal with it confirms (and
// which extends the caller's lease, harmlessly). A token that holds none of them (stale,
// forged, or another lock's) is ignored: the keys are taken as usual.
bool held_by_caller(Context& context, const RunOptions& options)
{
  const char* token = std::getenv("DLOCK_TOKEN");
  if (token == nullptr || *token == '\0') {
    return false;
  }
  std::vector<std::string> held;
  std::vector<std::string> free;
  bool shared = false; // the caller holds a --shared or --limit slot, not the lock alone
  for (const lock::LockName& name : options.keys) {
    lock::Outcome outcome =
      lock::renew_any(context.store, name, lock::RenewRequest{token, std::nullopt, false, {}},
                      context.request_timeout);
    (outcome.held ? held : free).push_back(name.str());
    shared = shared || outcome.slot;
  }
  if (held.empty()) {
    util::log_verbose("DLOCK_TOKEN does not hold lock '{}'; taking it as usual",
                      lock::join_names(options.keys));
    return false;
  }
  if (!free.empty()) {
    throw Error(ExitCode::usage,
                "the calling command holds lock '{}' but not '{}': a nested run may ask only for "
                "keys its caller holds (it runs at once), or only for others",
                held.front(), free.front());
  }
  if (shared && options.kind == lock::LockKind::exclusive()) {
    throw Error(ExitCode::usage,
                "the calling command holds lock '{}' shared or as a semaphore slot: an exclusive "
                "run inside it would wait for itself",
                held.front());
  }
  return true;
}

RunEnd run_locked(Context& context, const RunOptions& options, RunReport& report)
{
  const std::vector<lock::LockName>& names = options.keys;
  const lock::LockName& name = names.front();
  const std::string shown = lock::join_names(names); // the lock's name in messages
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT});
  // The guard is forked while the first attempt is in flight (the fork hides behind the
  // round trip), so that once the lock is ours only a message to it stands between the
  // acquisition and the command.
  std::optional<process::ProcessGroup> group;
  const std::string token = util::random_token();
  const lock::AcquireRequest request = options.acquire_request(
    token,
    lock::HolderInfo::current(lock::recorded_command(options.command, options.record_command)));

  hold::Acquisition acquisition(hold::system_clock(), context.store, signals,
                                options.wait_policy(context.request_timeout), names, request);
  acquisition.begin();
  try {
    // while the first attempt is in flight
    group.emplace(signals.original_mask(), options.command.empty() ? "" : options.command.front());
  } catch (const Error&) {
    acquisition.cancel();
    throw;
  }
  hold::Taken outcome = acquisition.finish();
  if (outcome.signal != 0) {
    util::log_verbose("interrupted by signal {} while waiting for lock '{}'", outcome.signal,
                      shown);
    report.interrupted(outcome.signal);
    // A Ctrl-C while waiting reached dlock's whole group already, the calling shell included.
    return RunEnd{128 + outcome.signal,
                  process::stops_calling_script(outcome.signal) ? outcome.signal : 0, false, true};
  }
  if (!outcome.acquired) {
    report.skipped(request.holder, outcome.held_by,
                   outcome.superseded ? "superseded"
                   : options.no_wait  ? "no_wait"
                                      : "wait_ran_out");
    return RunEnd{options.conflict_exit_code};
  }
  if (outcome.fence != 0) {
    util::log_verbose("acquired lock '{}' (fencing token {})", shown, outcome.fence);
  } else {
    util::log_verbose("acquired lock '{}'", shown); // the store said once why it has none
  }
  // who, without the command line: its arguments may hold what a log must not
  report.acquired(request.holder, outcome.fences.empty() ? std::vector<std::int64_t>{outcome.fence}
                                                         : outcome.fences);
  HeldLock held(context, names, token, options.ttl);

  // The lease the store granted: less than --ttl when a ZooKeeper's session bound is lower (no
  // --ttl given) or Redlock's majority took part of it.
  const util::Millis lease = std::min(options.ttl, outcome.validity.value_or(options.ttl));
  lock::WatchdogPolicy policy;
  policy.lease.ttl = lease;
  policy.lease.kill_after = options.kill_after.value_or(options.ttl / 4);
  policy.lease.request_limit = context.request_timeout + options.replicas.timeout; // WAIT's too
  policy.lease.drift = context.store.traits().clock_drift(options.ttl);
  policy.replicas = options.replicas;
  policy.on_lost_ignore = options.on_lost_ignore;
  policy.max_hold = options.max_hold;

  process::CommandSpec spec = command_spec(options);
  spec.env.insert(spec.env.begin(), {{"DLOCK_KEY", name.str()},
                                     {"DLOCK_KEYS", shown},
                                     {"DLOCK_TOKEN", token},
                                     {"DLOCK_TTL_MS", std::to_string(lease.count())}});
  // Token 0: the store has no fencing here (a database without dlock_fence): none is set,
  // rather than one a protected resource could mistake for a real token.
  if (outcome.fence != 0) {
    spec.env.insert(spec.env.end(), {{"DLOCK_FENCING_TOKEN", std::to_string(outcome.fence)},
                                     {"DLOCK_FENCING_TOKENS", join_numbers(outcome.fences)}});
  } else {
    spec.unset.insert(spec.unset.end(), {"DLOCK_FENCING_TOKEN", "DLOCK_FENCING_TOKENS"});
  }
  spec.inherit = context.store.inherited_descriptors();
  spec.hold = context.store.lease_descriptors();
  CommandEnd end;
  context.store.limit_blocking(policy.lease.request_timeout());
  Supervisor supervisor(context.store, hold::KeptLock{names, token, options.kind, options.ttl},
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
    util::log_warning("could not release lock '{}' ({}); {}", shown, error.what(),
                      context.store.traits().left_behind_after(lease));
  }
  if (released == true) {
    util::log_verbose("released lock '{}'", shown);
  }
  report.released(released, end.status);
  lock::RunVerdict verdict = supervisor.watchdog().verdict(released);
  std::string notice =
    verdict.notice ? lock::describe(*verdict.notice, shown, supervisor.loss_cause()) : "";
  if (verdict.notice) {
    util::log_error("{}", notice);
  }
  if (verdict.exit_code == static_cast<int>(ExitCode::lost)
      || supervisor.watchdog().ran_unprotected()) {
    report.lost(supervisor.replaced()               ? supervisor.loss_cause()
                : !supervisor.first_error().empty() ? supervisor.first_error()
                : !notice.empty()                   ? notice
                                                    : "the lease was lost",
                supervisor.replaced());
  }
  const bool stop_asked = end.stop_signal != 0;
  if (verdict.exit_code) {
    return RunEnd{*verdict.exit_code, 0, false, stop_asked};
  }
  if (process::stops_calling_script(end.signal)) {
    return RunEnd{end.status, end.signal, end.terminal_sent, stop_asked};
  }
  return RunEnd{end.status, 0, false, stop_asked};
}

} // namespace

RunEnd run_term(Context& context, const RunOptions& options)
{
  RunReport report(options.keys, options.kind, options.ttl, options.metrics_dir, context.store,
                   context.request_timeout);
  RunEnd end;
  try {
    end = run_locked(context, options, report); // every lock, process and socket is gone after
  } catch (const Error& error) {
    report.failed(static_cast<int>(error.code()), error.what());
    throw;
  }
  report.finished(end.die_of != 0 ? 128 + end.die_of : end.status);
  return end;
}

int run(Context& context, const RunOptions& options)
{
  if (held_by_caller(context, options)) {
    util::log_verbose("lock '{}' is held by the calling command already; running under its lease",
                      lock::join_names(options.keys));
    context.store.abandon(); // its connections are not the command's
    process::exec_in_place(command_spec(options));
  }
  RunEnd end = run_term(context, options);
  if (end.die_of != 0) {
    process::die_of_signal(end.die_of, end.to_group);
  }
  return end.status;
}

} // namespace dlock::commands
