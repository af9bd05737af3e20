#include "commands/lease_steps.hpp"

#include "commands/acquire_wait.hpp"
#include "commands/keep.hpp"
#include "process/process_table.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/syslog.hpp"
#include "util/random.hpp"

#include <unistd.h>

#include <cstdio>

namespace dlock::commands {

namespace {

// What acquire records of the process that ran it (the CI step or script that owns the
// lock): its program's name, never its command line, which every reader of the store sees.
std::string caller_name()
{
  std::string name = process::program_name(::getppid());
  return name.empty() ? "dlock acquire" : name;
}

} // namespace

int acquire(Context& context, const AcquireOptions& options)
{
  lock::require(context.store, lock::Feature::detached);
  const std::vector<lock::LockName>& names = options.keys;
  const std::string shown = lock::join_names(names);
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  const std::string token = util::random_token();
  // The lock belongs to the calling script, which outlives this process.
  lock::HolderInfo me = lock::HolderInfo::current(caller_name());
  me.pid = ::getppid();
  // --keep: the holder process is the lock's holder, for as long as the script lives.
  std::optional<Keeper> keeper;
  if (options.keep) {
    pid_t owner = options.keep->while_pid.value_or(process::calling_script(::getppid()));
    if (::kill(owner, 0) != 0 && errno == ESRCH) {
      throw Error(ExitCode::usage, "--while-pid {}: no such process", owner);
    }
    keeper.emplace(context, names, token, options.ttl, *options.keep, owner);
    me.pid = keeper->pid();
    me.command = fmt::format("acquire --keep for pid {}: {}", owner, me.command)
                   .substr(0, lock::max_command_length);
  }

  WaitPolicy policy =
    make_wait_policy(options.no_wait, options.fair, options.wait, context.request_timeout);
  policy.replicas = options.replicas;
  policy.kind = options.kind;
  WaitOutcome outcome = acquire_all_with_wait(context, names, token, options.ttl, me, policy, signals);
  if (process::stops_calling_script(outcome.signal)) {
    process::die_of_signal(outcome.signal, false); // nothing is held; the script stops too
  }
  if (outcome.signal != 0) {
    return 128 + outcome.signal;
  }
  if (!outcome.acquired) {
    util::syslog_event(util::EventLevel::notice, "skipped",
                       {{"key", shown}, {"reason", options.no_wait ? "no_wait" : "wait_ran_out"},
                        {"held_by", outcome.held_by}, {"by", "acquire"}});
    return options.conflict_exit_code;
  }
  if (keeper) {
    keeper->go(outcome.sent_at, outcome.validity);
  }
  std::string out;
  if (options.json) {
    util::JsonObject document;
    document.add("version", std::int64_t{1}).add("key", names.front().str());
    if (names.size() > 1) {
      std::vector<std::string> keys;
      for (const lock::LockName& name : names) {
        keys.push_back(name.str());
      }
      document.add("keys", keys).add("fencing_tokens", outcome.fences);
    }
    out = document
            .add("token", token)
            .add("fencing_token", outcome.fence)
            .add("ttl_ms", static_cast<std::int64_t>(outcome.validity.value_or(options.ttl).count()))
            .str();
  } else {
    out = token;
  }
  out += "\n";
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    // Nobody got the token, so nobody could ever release the lock: give it back.
    if (keeper) {
      keeper->stop();
    }
    release_all(context, names, token);
    throw Error(ExitCode::internal, "could not write the token to stdout; lock released");
  }
  util::log_verbose("acquired lock '{}' (fencing token {})", shown, outcome.fence);
  util::syslog_event(util::EventLevel::info, "acquired",
                     {{"key", shown},
                      {"kind", options.kind.code()},
                      {"fencing_token", std::to_string(outcome.fence)},
                      {"ttl_ms", std::to_string(options.ttl.count())},
                      {"by", options.keep ? "acquire --keep" : "acquire"}});
  return 0;
}

namespace {

// A lease acquire --keep's holder saw lost: says when and why, once (the record goes).
bool report_kept_loss(const KeepRecord& record, const std::vector<lock::LockName>& names)
{
  std::optional<std::string> lost = record.lost();
  if (!lost) {
    return false;
  }
  util::log_error("the lease on lock '{}' was lost while acquire --keep held it, at {}",
                  lock::join_names(names), *lost);
  record.forget();
  return true;
}

} // namespace

int renew(Context& context, const RenewOptions& options)
{
  if (report_kept_loss(KeepRecord(options.token), options.keys)) {
    return static_cast<int>(ExitCode::lost);
  }
  int status = 0;
  for (const lock::LockName& name : options.keys) {
    lock::Outcome outcome =
      lock::renew_any(context.store, name,
                      lock::RenewRequest{options.token, options.ttl, true, options.replicas},
                      context.request_timeout);
    if (!outcome.held) {
      util::log_error("lock '{}' is not held by this token (it expired or was taken over)",
                      name.str());
      status = static_cast<int>(ExitCode::lost);
      continue;
    }
    int acknowledged = outcome.replicas_acknowledged.value_or(0);
    if (acknowledged < options.replicas.replicas) {
      // The master extended the lease, but a failover now could lose the extension.
      throw Error(ExitCode::unavailable,
                  "the renewal of lock '{}' reached {} of {} replicas within {} (--wait-replicas); "
                  "the lease was extended on the master only",
                  name.str(), acknowledged, options.replicas.replicas,
                  util::format_duration(options.replicas.timeout));
    }
  }
  return status;
}

namespace {

// release --force of one key: whoever holds it (every holder of a --shared or --limit key).
void release_by_force(Context& context, const lock::LockName& name)
{
  lock::LockStatus before = context.store.status(name, util::deadline_after(context.request_timeout));
  context.store.start_release(name, "");
  bool held = lock::await_outcome(context.store, lock::Outcome::Op::release,
                                  util::deadline_after(context.request_timeout))
                .held;
  if (held) {
    util::syslog_event(util::EventLevel::warning, "released_by_force",
                       {{"key", name.str()},
                        {"evicted", before.slots.size() > 1
                                      ? fmt::format("{} holders ({})", before.slots.size(),
                                                    before.kind.describe())
                                      : before.holder.identity()},
                        {"fencing_token", std::to_string(before.holder.fence)}});
  }
  if (!held) {
    util::log_warning("lock '{}' was not held", name.str());
  } else if (before.slots.size() > 1) {
    util::log_warning("released lock '{}' by force; evicted its {} holders ({})", name.str(),
                      before.slots.size(), before.kind.describe());
  } else {
    util::log_warning("released lock '{}' by force; evicted {} (fencing token {})", name.str(),
                      before.holder.describe(), before.holder.fence);
  }
}

} // namespace

int release(Context& context, const ReleaseOptions& options)
{
  if (options.force) {
    for (const lock::LockName& name : options.keys) {
      release_by_force(context, name);
    }
    return 0;
  }
  KeepRecord record(options.token);
  if (report_kept_loss(record, options.keys)) {
    return static_cast<int>(ExitCode::lost);
  }
  // An acquire --keep holder of this token stops renewing, and does not take this release
  // for a loss.
  record.mark_released();
  int status = 0;
  try {
    for (const lock::LockName& name : options.keys) {
      context.store.start_release(name, options.token);
      if (!lock::await_outcome(context.store, lock::Outcome::Op::release,
                               util::deadline_after(context.request_timeout))
             .held) {
        util::log_error("lock '{}' is not held by this token (it expired or was taken over)",
                        name.str());
        util::syslog_event(util::EventLevel::warning, "lost",
                           {{"key", name.str()}, {"reason", "not held by the token at release"},
                            {"by", "release"}});
        status = static_cast<int>(ExitCode::lost);
      } else {
        util::syslog_event(util::EventLevel::info, "released", {{"key", name.str()}, {"by", "release"}});
      }
    }
  } catch (const Error&) {
    record.unmark_released(); // still held: the holder goes on, and a loss is still a loss
    throw;
  }
  if (!record.signal_holder(SIGTERM)) {
    record.forget();
  }
  return status;
}

} // namespace dlock::commands
