#pragma once

#include "commands/context.hpp"
#include "lock/history.hpp"
#include "lock/name.hpp"

#include <cstddef>
#include <optional>
#include <vector>

namespace dlock::commands {

// `dlock history KEY [--json] [--limit N]`
struct HistoryOptions {
  lock::LockName key;
  bool json = false;
  std::size_t limit = 20; // 1 to lock::max_history_events
};

// `dlock history`: the lock's last events, newest first, as its store kept them; exit 0 (an
// empty history too). A store that keeps none refuses with 64 and the stores that do.
int history(Context& context, const HistoryOptions& options);

// Appends event to the history of each of keys, when the store keeps one (else nothing). With
// a deadline, waits for an answer per key till then (a process about to exit); without
// one, returns while they are in flight (their outcomes are passed over by later waits). A
// history is a record, not the lock: a failure is said with -v only.
void record_event(lock::Store& store, const std::vector<lock::LockName>& keys,
                  const lock::HistoryEvent& event, std::optional<util::TimePoint> deadline);

} // namespace dlock::commands
