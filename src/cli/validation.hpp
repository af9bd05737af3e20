#pragma once

#include "cli/arguments.hpp"
#include "cli/secrets.hpp"
#include "commands/acquire.hpp"
#include "commands/barrier.hpp"
#include "commands/elect.hpp"
#include "commands/history.hpp"
#include "commands/latch.hpp"
#include "commands/leader.hpp"
#include "commands/list.hpp"
#include "commands/release.hpp"
#include "commands/renew.hpp"
#include "commands/run.hpp"
#include "commands/status.hpp"
#include "commands/wait.hpp"
#include "stores/config.hpp"

// From Arguments as typed to the option structs commands/ takes: what CLI11 cannot check
// (durations, option combinations, lock names, tokens), each failure an Error(usage) naming
// the option.
namespace dlock::cli {

// Options every subcommand shares, resolved (URLs taken from -u or DLOCK_URL, password read).
struct GlobalOptions {
  stores::StoreConfig store;
  // Keeps the store's password out of a command's environment (DLOCK_PASSWORD, a password
  // in DLOCK_URL); a password file is passed on by name, so nested dlock calls still work.
  EnvironmentChanges hide_password;
};

// Each resolve_* checks what CLI11 cannot and throws Error(usage) naming the option.
GlobalOptions resolve_global(const Arguments& args);
commands::RunOptions resolve_run(const Arguments& args, const GlobalOptions& global);
commands::StatusOptions resolve_status(const Arguments& args);
commands::ListOptions resolve_list(const Arguments& args);
commands::AcquireOptions resolve_acquire(const Arguments& args);
commands::RenewOptions resolve_renew(const Arguments& args);
commands::ReleaseOptions resolve_release(const Arguments& args);
commands::WaitFreeOptions resolve_wait_free(const Arguments& args);
commands::BarrierOptions resolve_barrier(const Arguments& args);
commands::LatchOptions resolve_latch(const Arguments& args);
commands::ElectOptions resolve_elect(const Arguments& args, const GlobalOptions& global);
commands::LeaderOptions resolve_leader(const Arguments& args);
// history: the key, and --limit within 1 to lock::max_history_events.
commands::HistoryOptions resolve_history(const Arguments& args);

} // namespace dlock::cli
