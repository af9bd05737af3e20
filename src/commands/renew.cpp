#include "commands/renew.hpp"

#include "commands/keep_record.hpp"
#include "util/log.hpp"

namespace dlock::commands {

int renew(Context& context, const RenewOptions& options)
{
  if (KeepRecord(options.token).report_loss(options.keys)) {
    return static_cast<int>(ExitCode::lost);
  }
  int status = 0;
  for (const lock::LockName& name : options.keys) {
    lock::Outcome outcome = lock::renew_any(
      context.store, name, lock::RenewRequest{options.token, options.ttl, true, options.replicas},
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

} // namespace dlock::commands
