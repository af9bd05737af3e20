#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dlock::lock {

// How a key is held: by one holder (the default), by many shared holders or one exclusive
// (a read/write lock, flock's -s), or by up to N holders (a counting semaphore, --limit N).
// Every holder of one key must ask for a compatible kind: exclusive and shared share a key,
// a semaphore shares it with nothing but the same N.
struct LockKind {
  enum class Mode { exclusive, shared, limit };
  Mode mode = Mode::exclusive;
  int limit = 1; // Mode::limit: holders at once (2 or more)

  static LockKind exclusive() { return {}; }
  static LockKind shared() { return {Mode::shared, 1}; }
  // --limit n: a semaphore of n holders; 1 is the exclusive lock.
  static LockKind semaphore(int n) { return n == 1 ? exclusive() : LockKind{Mode::limit, n}; }

  // Several holders at once (a slot each), rather than the lock alone.
  bool has_slots() const noexcept { return mode != Mode::exclusive; }
  // "exclusive", "shared" or "limit:N": how a store records it, and reads it back.
  std::string code() const;
  static std::optional<LockKind> from_code(std::string_view code);
  // For messages: "an exclusive lock", "a shared lock", "a semaphore of N (--limit N)".
  std::string describe() const;

  friend bool operator==(const LockKind&, const LockKind&) = default;
};

} // namespace dlock::lock
