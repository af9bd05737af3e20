#include "commands/lease_steps.hpp"

#include "commands/acquire_wait.hpp"
#include "util/json.hpp"
#include "util/log.hpp"
#include "util/random.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace dlock::commands {

namespace {

// The command line of the process that ran dlock (the CI step or script that owns the lock).
std::string parent_command_line()
{
  std::ifstream file(fmt::format("/proc/{}/cmdline", ::getppid()), std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  std::string line = buffer.str();
  while (!line.empty() && line.back() == '\0') {
    line.pop_back();
  }
  for (char& c : line) {
    c = c == '\0' ? ' ' : c;
  }
  return line.empty() ? "dlock acquire" : line;
}

} // namespace

int acquire(Context& context, const AcquireOptions& options)
{
  const lock::LockName& name = options.key;
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  const std::string token = util::random_token();
  // The lock belongs to the calling script, which outlives this process.
  lock::HolderInfo me = lock::HolderInfo::current(parent_command_line());
  me.pid = ::getppid();

  WaitPolicy policy =
    make_wait_policy(options.no_wait, options.fair, options.wait, context.request_timeout);
  policy.replicas = options.replicas;
  WaitOutcome outcome = acquire_with_wait(context, name, token, options.ttl, me, policy, signals);
  if (process::stops_calling_script(outcome.signal)) {
    process::die_of_signal(outcome.signal, false); // nothing is held; the script stops too
  }
  if (outcome.signal != 0) {
    return 128 + outcome.signal;
  }
  if (!outcome.acquired) {
    return options.conflict_exit_code;
  }
  std::string out;
  if (options.json) {
    out = util::JsonObject()
            .add("version", std::int64_t{1})
            .add("key", name.str())
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
    context.store.start_release(name, token);
    lock::await_outcome(context.store, lock::Outcome::Op::release,
                        util::deadline_after(context.request_timeout));
    throw Error(ExitCode::internal, "could not write the token to stdout; lock released");
  }
  util::log_verbose("acquired lock '{}' (fencing token {})", name.str(), outcome.fence);
  return 0;
}

int renew(Context& context, const RenewOptions& options)
{
  context.store.start_renew(options.key,
                            lock::RenewRequest{options.token, options.ttl, true, options.replicas});
  lock::Outcome outcome =
    lock::await_outcome(context.store, lock::Outcome::Op::renew,
                        util::deadline_after(context.request_timeout + options.replicas.timeout));
  if (!outcome.held) {
    util::log_error("lock '{}' is not held by this token (it expired or was taken over)",
                    options.key.str());
    return static_cast<int>(ExitCode::lost);
  }
  int acknowledged = outcome.replicas_acknowledged.value_or(0);
  if (acknowledged < options.replicas.replicas) {
    // The master extended the lease, but a failover now could lose the extension.
    throw Error(ExitCode::unavailable,
                "the renewal of lock '{}' reached {} of {} replicas within {} (--wait-replicas); "
                "the lease was extended on the master only",
                options.key.str(), acknowledged, options.replicas.replicas,
                util::format_duration(options.replicas.timeout));
  }
  return 0;
}

int release(Context& context, const ReleaseOptions& options)
{
  const lock::LockName& name = options.key;
  if (options.force) {
    lock::LockStatus before =
      context.store.status(name, util::deadline_after(context.request_timeout));
    context.store.start_release(name, "");
    if (lock::await_outcome(context.store, lock::Outcome::Op::release,
                            util::deadline_after(context.request_timeout))
          .held) {
      util::log_warning("released lock '{}' by force; evicted {} (fencing token {})", name.str(),
                        before.holder.describe(), before.holder.fence);
    } else {
      util::log_warning("lock '{}' was not held", name.str());
    }
    return 0;
  }
  context.store.start_release(name, options.token);
  if (!lock::await_outcome(context.store, lock::Outcome::Op::release,
                           util::deadline_after(context.request_timeout))
         .held) {
    util::log_error("lock '{}' is not held by this token (it expired or was taken over)",
                    name.str());
    return static_cast<int>(ExitCode::lost);
  }
  return 0;
}

} // namespace dlock::commands
