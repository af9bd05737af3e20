#pragma once

#include "redis/script.hpp"

namespace dlock::lock::scripts {

// KEYS: lock, fence, holder. ARGV: token, ttl_ms, host, pid, user, command.
// Takes the lock if free and, atomically with it, bumps the fencing counter and stores the
// holder metadata. Returns {1, fence} when taken, {0, pttl, holder-hash} when held.
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
