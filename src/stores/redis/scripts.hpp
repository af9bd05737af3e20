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
// Extends the lease only while token holds it: 1 or 0. Only keys that exist while the lock
// is held are named, so that a Cluster migrating the slot serves it instead of TRYAGAIN.
const Script& renew();

// KEYS: holders, slots, kind. ARGV: as renew(). Extends a --shared or --limit holder's slot
// only while token holds one (its lease not ended): 1 or 0.
const Script& renew_slot();

// KEYS: lock, holder, waiters, queue, queue-expiry, wake. ARGV: token ("" = force).
// Deletes the lock only while token holds it (any holder when forced): 0 if not. Then wakes
// one unfair waiter (1), unless a --fair waiter heads the queue: its id is returned, and the
// client wakes it with wake(), since Redis Cluster wants every key a script touches declared
// and the script only learns this waiter's list inside.
const Script& release();

// KEYS: a --fair waiter's wake list (LockKeys::wake_for). Wakes that waiter: 1.
const Script& wake();

// KEYS: fence. ARGV: at_least, keep_ms. Raises the fencing counter to at least at_least
// (Redlock: the token a majority handed out, spread to every node). 1.
const Script& raise_fence();

// KEYS: lock, holder, fence, waiters, queue-expiry. Read-only snapshot for status and list:
// {exists, pttl, holder-hash, last fence, live waiters, server time ms}.
const Script& inspect();

} // namespace dlock::redis::scripts
