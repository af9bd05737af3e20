#pragma once

#include "stores/redis/script.hpp"

// The Lua scripts, one file each in scripts/ (NAME.lua, with prelude.lua before those that use
// its functions). CMake compiles them in with their SHA-1 (src/CMakeLists.txt), so that
// dlock never hashes at run time; editing one reconfigures the build.
namespace dlock::redis::scripts {

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
const Script& acquire();

// KEYS: lock, holder. ARGV: token, ttl_ms ("" = the holder's own ttl), "1" to store ttl_ms.
// Extends the lease only while token holds it: 1 or 0.
const Script& renew();

// KEYS: lock, holder, waiters, queue, queue-expiry, wake. ARGV: token ("" = force), the
// --fair wake-list prefix (LockKeys::fair_wake_prefix).
// Deletes the lock only while token holds it (any holder when forced) and wakes exactly one
// waiter: the head of the --fair queue if there is one, else one unfair waiter. 1 or 0.
const Script& release();

// KEYS: lock, holder, fence, waiters, queue-expiry. Read-only snapshot for status and list:
// {exists, pttl, holder-hash, last fence, live waiters, server time ms}.
const Script& inspect();

} // namespace dlock::redis::scripts
