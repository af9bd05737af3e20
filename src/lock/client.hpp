#pragma once

#include "lock/holder.hpp"
#include "lock/keys.hpp"
#include "redis/connection.hpp"

#include <optional>
#include <string>

namespace dlock::lock {

// The outcome of one acquisition attempt.
struct AcquireResult {
  bool acquired = false;
  std::int64_t fence = 0;        // when acquired: this holder's fencing token
  std::int64_t holder_ttl_ms = 0; // when not: the current holder's remaining lease (-1: none)
  HolderInfo holder;             // when not: who holds it (may be empty)
  util::Millis block{0};         // when not: how long to wait for a wake-up before retrying
};

// How an acquisition attempt waits if the lock is held.
enum class WaitMode {
  once, // --no-wait: a single attempt, not registered as a waiter
  wait, // woken by any release, no order among waiters
  fair, // first come, first served queue
};

// A waiter's identity and patience, sent with each attempt.
struct WaitTicket {
  WaitMode mode = WaitMode::once;
  std::string waiter_id;      // random, per dlock process
  util::Millis max_block{0};  // never block past the caller's --wait deadline
};

// The lock protocol on one Redis server: acquire, renew and release one lock by token.
class LockClient {
public:
  LockClient(redis::Connection& connection, LockKeys keys);

  // One attempt to take the lock for token; if held, registers the waiter per ticket.
  AcquireResult try_acquire(const std::string& token, util::Millis ttl, const HolderInfo& me,
                            const WaitTicket& ticket, util::TimePoint deadline);
  // Queues a BLPOP on the waiter's wake list for block (the reply is nil on timeout).
  void send_wait(const WaitTicket& ticket, util::Millis block);
  // Forgets a waiter that gives up (best effort; registrations also expire on their own).
  void withdraw(const WaitTicket& ticket, util::TimePoint deadline);
  // Extends the lease if token still holds it; false if not. Without ttl, the holder's own
  // lease length is used; with one, it becomes the holder's lease length.
  bool renew(const std::string& token, std::optional<util::Millis> ttl, util::TimePoint deadline);
  // Deletes the lock if token still holds it and wakes one waiter; false if not.
  bool release(const std::string& token, util::TimePoint deadline);
  // Deletes the lock whoever holds it and wakes one waiter; false if it was free.
  bool force_release(util::TimePoint deadline);

  // Non-blocking renewal for the run loop: queue it (with EVAL after a NOSCRIPT reply)...
  void send_renew(const std::string& token, util::Millis ttl, bool with_source = false);
  // ...and read its reply: true/false as renew, nullopt for NOSCRIPT (send again with source).
  std::optional<bool> parse_renew(const redisReply& reply) const;

  const LockKeys& keys() const noexcept { return m_keys; }
  redis::Connection& connection() noexcept { return m_connection; }

private:
  std::vector<std::string> release_keys() const;

  redis::Connection& m_connection;
  LockKeys m_keys;
};

} // namespace dlock::lock
