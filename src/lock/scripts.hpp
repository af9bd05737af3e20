#pragma once

#include "redis/script.hpp"

namespace dlock::lock::scripts {

// KEYS: lock, fence, holder, waiters, queue, queue-expiry.
// ARGV: token, ttl_ms, host, pid, user, command, waiter_id, mode, max_block_ms.
// Takes the lock if free (and, for mode "fair", if this waiter heads the queue; unfair
// acquirers let a non-empty fair queue go first) and, atomically with it, takes the next
// fencing token (never below one issued before, even if the counter was lost) and stores the
// holder metadata: {1, fence}. Otherwise, in the same step, registers
// the waiter (mode "wait": in the waiters set; "fair": in the queue; "once": not at all), so a
// release can never slip between the failed attempt and the wait, and returns
// {0, pttl, holder-hash, block_ms}: how long to block on the wake list before trying again.
// Registrations expire 2s after that block ends, so a dead waiter is forgotten quickly.
const redis::Script& acquire();

// KEYS: lock, holder. ARGV: token, ttl_ms ("" = the holder's own ttl), "1" to store ttl_ms.
// Extends the lease only while token holds it: 1 or 0.
const redis::Script& renew();

// KEYS: lock, holder, waiters, queue, queue-expiry, wake. ARGV: token ("" = force).
// Deletes the lock only while token holds it (any holder when forced) and wakes exactly one
// waiter: the head of the --fair queue if there is one, else one unfair waiter. 1 or 0.
const redis::Script& release();

// KEYS: lock, holder, fence, waiters, queue-expiry. Read-only snapshot for status and list:
// {exists, pttl, holder-hash, last fence, live waiters, server time ms}.
const redis::Script& inspect();

} // namespace dlock::lock::scripts
