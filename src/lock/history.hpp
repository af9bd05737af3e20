#pragma once

#include "lock/holder.hpp"
#include "lock/name.hpp"
#include "util/clock.hpp"
#include "util/duration.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// A lock's history (dlock history): the last things that happened to it, kept in the store
// beside the lock, so that "who held it, how did it end, why did my deploy wait" has an answer
// after the fact. Stores keep events as opaque text; this is the one home of what they say.
namespace dlock::lock {

// One entry of a lock's history. Never the command line: only who, when and how it ended.
struct HistoryEvent {
  enum class Kind {
    acquired, // taken (by run, elect, acquire), after waiting waited_ms
    released, // released by its holder, after held_ms; exit_status: the run's
    lost,     // the lease was lost while the command ran (detail: why); stopped
    replaced, // taken over by --replace (detail: by whom); the command was stopped
    skipped,  // not obtained: -n, --wait ran out, or superseded (detail: who held it)
    forced,   // release --force (holder: who forced it; detail: whom it evicted)
  };

  Kind kind = Kind::acquired;
  std::int64_t at_ms = 0; // when, in Unix ms, by the clock of the host that recorded it
  // Who: user, host, pid, note and fencing token; its command is never recorded.
  HolderInfo holder;
  std::int64_t waited_ms = -1;   // acquired, skipped: how long it waited (-1: not said)
  std::int64_t held_ms = -1;     // released, lost, replaced: how long it held (-1: not said)
  std::int64_t exit_status = -1; // released, lost, replaced: dlock's exit status (-1: none)
  std::string detail;            // see Kind; printable, at most max_event_detail_bytes

  // An event of kind now (this host's clock), by holder without its command.
  static HistoryEvent now(Kind kind, const HolderInfo& holder);
};

// The events a store keeps per lock: older ones are dropped as new ones come.
inline constexpr std::size_t max_history_events = 100;
// How long a lock's history is kept after its last event, as long as its fencing counter.
inline constexpr util::Millis history_keep{7LL * 24 * 3600 * 1000};
// Longest event text a store keeps or gives back: a larger one is not dlock's.
inline constexpr std::size_t max_event_bytes = 4096;
// Longest detail of an event, in bytes.
inline constexpr std::size_t max_event_detail_bytes = 512;

// An event kind as history shows it: "acquired", "lost".
std::string_view event_name(HistoryEvent::Kind kind);

// The event as one line of printable ASCII without blanks ("v1 event=... at=..."), at most
// max_event_bytes, which any store can keep as it is (a stream field, a row, a node, a line).
std::string encode_event(const HistoryEvent& event);
// The event a store gave back, or nothing when the text is not one encode_event could have
// written (another tenant's, damaged, larger than max_event_bytes). Never throws.
std::optional<HistoryEvent> decode_event(std::string_view text);

// A lock's history as a store keeps it (Feature::history): events appended to a capped log per
// lock name that expires history_keep after its last event.
class History {
public:
  virtual ~History() = default;
  // Appends text (encode_event's) to name's log, drops its events beyond max_history_events,
  // oldest first, and has the log expire history_keep after now (Outcome::Op::record).
  virtual void start_record(const LockName& name, const std::string& text) = 0;
  // The newest events of name's log, at most limit, newest first, as recorded (blocking until
  // deadline); texts longer than max_event_bytes are left out. Empty when it has none.
  virtual std::vector<std::string> events(const LockName& name, std::size_t limit,
                                          util::TimePoint deadline) = 0;
};

} // namespace dlock::lock
