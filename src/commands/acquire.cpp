#include "commands/acquire.hpp"

#include "commands/acquire_keep.hpp"
#include "commands/history.hpp"
#include "hold/acquisition.hpp"
#include "process/process_table.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/random.hpp"
#include "util/syslog.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
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
  // A lock with no process behind it needs a lease that is not a session or a descriptor.
  lock::require(context.store, options.keep ? lock::Feature::keep : lock::Feature::detached);
  const std::vector<lock::LockName>& names = options.keys;
  const std::string shown = lock::join_names(names);
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  const std::string token = util::random_token();
  // The lock belongs to the calling script, which outlives this process.
  lock::HolderInfo me = lock::HolderInfo::current(caller_name());
  me.pid = ::getppid();
  lock::AcquireRequest request = options.acquire_request(token, me);
  const lock::HolderInfo holder = request.holder; // for the history
  const util::TimePoint started = util::monotonic_now();
  hold::WaitPolicy policy = options.wait_policy(context.request_timeout);
  // --keep: the keep process takes the lock and is its holder, for as long as the script lives.
  std::optional<KeepProcess> keeper;
  hold::Taken outcome;
  // The history, written by this process (with --keep too: the keep process was forked before
  // the store opened anything, so these are connections of this process's own).
  auto record = [&](lock::HistoryEvent::Kind kind, std::int64_t fence, std::string detail) {
    lock::HistoryEvent event = lock::HistoryEvent::now(kind, holder);
    event.holder.fence = fence;
    event.waited_ms =
      std::chrono::duration_cast<util::Millis>(util::monotonic_now() - started).count();
    event.detail = std::move(detail);
    record_event(context.store, names, event, util::deadline_after(context.request_timeout));
  };
  if (options.keep) {
    pid_t owner = options.keep->while_pid.value_or(process::calling_script(::getppid()));
    if (::kill(owner, 0) != 0 && errno == ESRCH) {
      throw Error(ExitCode::usage, "--while-pid {}: no such process", owner);
    }
    keeper.emplace(context, names, policy, std::move(request), *options.keep, owner);
    outcome = keeper->outcome(signals);
  } else {
    outcome = hold::Acquisition(hold::system_clock(), context.store, signals, policy, names,
                                std::move(request))
                .finish();
  }
  if (process::stops_calling_script(outcome.signal)) {
    process::die_of_signal(outcome.signal, false); // nothing is held; the script stops too
  }
  if (outcome.signal != 0) {
    return 128 + outcome.signal;
  }
  if (!outcome.acquired) {
    util::syslog_event(util::EventLevel::notice, "skipped",
                       {{"key", shown},
                        {"reason", outcome.superseded ? "superseded"
                                   : options.no_wait  ? "no_wait"
                                                      : "wait_ran_out"},
                        {"held_by", outcome.held_by},
                        {"by", "acquire"}});
    record(lock::HistoryEvent::Kind::skipped, 0,
           fmt::format("{}; held by {}",
                       outcome.superseded ? "superseded"
                       : options.no_wait  ? "no_wait"
                                          : "wait_ran_out",
                       outcome.held_by.empty() ? "?" : outcome.held_by));
    return options.conflict_exit_code;
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
    out =
      document.add("token", token)
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
      keeper->stop(); // it releases what it holds
    } else {
      hold::release_all(context.store, names, token, context.request_timeout);
    }
    throw Error(ExitCode::internal, "could not write the token to stdout; lock released");
  }
  util::log_verbose("acquired lock '{}' (fencing token {})", shown, outcome.fence);
  record(lock::HistoryEvent::Kind::acquired, outcome.fence,
         options.keep ? "dlock acquire --keep" : "dlock acquire");
  util::syslog_event(util::EventLevel::info, "acquired",
                     {{"key", shown},
                      {"kind", options.kind.code()},
                      {"fencing_token", std::to_string(outcome.fence)},
                      {"ttl_ms", std::to_string(options.ttl.count())},
                      {"by", options.keep ? "acquire --keep" : "acquire"}});
  return 0;
}

} // namespace dlock::commands
