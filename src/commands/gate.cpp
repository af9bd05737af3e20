#include "commands/gate.hpp"

#include "util/log.hpp"

namespace dlock::commands {

lock::Coordination& require_coordination(Context& context)
{
  return lock::require_coordination(context.store);
}

int wait_at_gate(Context& context, const lock::LockName& name, const hold::Gate& gate,
                 std::optional<util::Millis> wait, int conflict_exit_code,
                 const std::string& opened)
{
  // The signals that end a wait, as for acquire.
  process::SignalFd signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  hold::WaitPolicy policy = hold::make_wait_policy(false, false, wait, context.request_timeout);
  hold::Passed end =
    hold::Waiter(hold::system_clock(), context.store, signals, policy).pass(name, gate);
  if (end.open) {
    util::log_verbose("{}", opened);
  }
  if (process::stops_calling_script(end.signal)) {
    process::die_of_signal(end.signal, false); // nothing is held; the script stops too
  }
  if (end.signal != 0) {
    return 128 + end.signal;
  }
  return end.open ? 0 : conflict_exit_code;
}

} // namespace dlock::commands
