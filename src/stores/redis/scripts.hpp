#pragma once

#include "stores/redis/script.hpp"

// The Lua scripts, one file each in scripts/ (NAME.lua, with prelude.lua before those that use
// its functions). CMake compiles them in with their SHA-1 (src/CMakeLists.txt), so that
// dlock never hashes at run time; editing one reconfigures the build.
namespace dlock::redis::scripts {

// KEYS: lock, fence, holder, waiters, queue, queue-expiry, holders, slots, kind, writers, wake,
// watchers, freed, newest, leader-watchers, leader-wake.
// ARGV: token, ttl_ms, host, pid, user, command, waiter_id, mode, max_block_ms, kind, note,
// min_hold_ms, lock_delay_ms, replace ("1"/"0"), supersede ("1"/"0"), registered ("1"/"0"),
// value (a dlock elect candidate's; "" for others).
// The policies live in the holder record (see holder_policy in prelude.lua): --min-hold keeps
// the lock key until hold_until, --lock-delay keeps the holder record that much past the lock
// key unless released cleanly (a free key with such a record cannot be taken), --replace
// writes the acquirer's record into the holder's, --supersede writes the newest waiter.
// Takes the lock if free (and, for mode "fair", if this waiter heads the queue; unfair
// acquirers let a non-empty fair queue go first) and, atomically with it, takes the next
// fencing token (never below one issued before, even if the counter was lost) and stores the
// holder metadata: {1, fence}. Otherwise, in the same step, registers
// the waiter (mode "wait": in the waiters set; "fair": in the queue; "once": not at all), so a
// release can never slip between the failed attempt and the wait, and returns
// {0, pttl, holder-hash, block_ms, slot holders, state, replace asked, superseded, newest's
// record}: block_ms is how long to block on the wake list before trying again; state 1 says the
// holder's command ended (kept for its --min-hold), 2 a --lock-delay (pttl: what is left).
// Registrations expire 2s after that block ends, so a dead waiter is forgotten quickly.
// Taking a free key while watchers (dlock wait) are registered records when, in freed; and
// wakes every live leader watcher (leader()) on leader-wake, one push each (less those
// pending), whoever takes it (a candidate, or a plain run, leads).
const Script& acquire();

// KEYS: lock, holder. ARGV: token, ttl_ms ("" = the holder's own ttl), "1" to store ttl_ms.
// Extends the lease only while token holds it: 1 or 0 (never below its --min-hold, its record
// by its --lock-delay more); {2, record} when a --replace acquirer asked it to stand down (not
// extended). Only keys that exist while the lock is held are named, so that a Cluster
// migrating the slot serves it instead of TRYAGAIN (which is why the policies live in the
// holder record rather than in keys of their own).
const Script& renew();

// KEYS: holders, slots, kind. ARGV: as renew(). Extends a --shared or --limit holder's slot
// only while token holds one (its lease not ended): 1 or 0.
const Script& renew_slot();

// KEYS: lock, holder, waiters, queue, queue-expiry, wake, holders, slots, kind, watchers,
// watch, leader-watchers, leader-wake. ARGV: token ("" = force), "1" to free it at once
// (Node::start_give_back).
// Deletes the lock only while token holds it (any holder when forced): 0 if not; {ms left}
// when the token released before its --min-hold is over (kept, marked ended). A forced
// release starts the holder's --lock-delay (or clears one pending on a free key). Wakes every
// live leader watcher on leader-wake; once the key is free, every live watcher (dlock wait)
// on the watch list; one push each (less those pending). Then wakes one unfair waiter (1), unless a
// --fair waiter heads the queue: its id is returned, and the client wakes it with wake(), since
// Redis Cluster wants every key a script touches declared and the script only learns this waiter's
// list inside.
const Script& release();

// KEYS: a --fair waiter's wake list (LockKeys::wake_for), or a barrier generation's
// (LockKeys::barrier_wake). ARGV: how many wake-ups the list should hold (default 1). Tops
// it up to that many, expiring in 60s: 1.
const Script& wake();

// KEYS: fence. ARGV: at_least, keep_ms. Raises the fencing counter to at least at_least
// (Redlock: the token a majority handed out, spread to every node). 1.
const Script& raise_fence();

// KEYS: lock, holder, fence, waiters, queue-expiry, holders, slots, kind. Read-only snapshot
// for status and list: {exists, pttl, holder-hash, last fence, live waiters, server time ms,
// kind, slots, ended (--min-hold), delay left (--lock-delay)}.
const Script& inspect();

// The waiters that take nothing. Each registers, in the same step as a failed check, in a
// sorted set of its own scored by when the registration lapses (2s after the block it is told),
// and blocks on a wake list of its own, so that none takes a wake-up meant for lock waiters.

// KEYS: lock, holder, holders, slots, watchers, freed. ARGV: watcher_id, since (server µs of
// the first attempt that found the key held; 0 on the first), max_block_ms.
// dlock wait: {1} if the key is free (no exclusive holder, no slot holder with lease left) or
// was taken from free after since (see acquire); else registers the watcher and returns
// {0, pttl, holder-hash, block_ms, slot holders, since}: block_ms is at most the holder's
// remaining lease, so that a crashed holder's expiry is noticed.
const Script& watch();

// KEYS: lock, holder, holders, slots, leader-watchers. ARGV: watcher_id, since (the
// term seen; 0 on the first), max_block_ms.
// dlock leader --watch: the term is the exclusive holder's fence (1 for a holder whose record
// names none; for slot holders, the lowest fence among them), 0 when free. Answers
// {open, term, pttl, holder-hash (with its value), block_ms, slot holders}: open (1) when the
// term is not since (the watcher's registration, done with, is removed); else (0) registers
// the watcher among the leader watchers and says how long to block (at most the holder's
// remaining lease): woken on leader-wake by a release, or by an acquisition from free.
const Script& leader();

// KEYS: barrier (hash: generation, parties), arrivals. ARGV: party_id, parties, the generation
// joined (0: none yet), max_block_ms, keep_ms.
// dlock barrier: {1, generation, parties, n} when this arrival is the last one (the next
// generation starts; the client wakes the n others on the generation's list with wake()), or
// when the generation joined has tripped since (n = 0); {2, generation, parties in progress}
// when a barrier of other parties is in progress (nothing registered); else registers the
// arrival and returns {0, generation, parties, arrived, block_ms}. A new barrier's generation
// starts at the server's clock in µs (above any it had, should its state be lost); lapsed
// arrivals no longer count; the state is kept keep_ms after the last arrival.
const Script& barrier();

// KEYS: barrier, arrivals. ARGV: party_id, the generation joined. Withdraws a party that gives
// up, unless its generation tripped first: 1 if it had (nothing withdrawn), else 0.
const Script& barrier_leave();

// KEYS: latch, latch-waiters. ARGV: waiter_id, max_block_ms.
// dlock latch --wait: {1, 0} if the count is zero; else (or if no latch is set yet) registers
// the waiter and returns {0, count (-1: none), block_ms}.
const Script& latch_check();

// KEYS: latch, latch-waiters, latch-wake. ARGV: count, expire_ms. dlock latch --count: sets
// the count (a latch set before starts again), expiring after expire_ms; a count of zero wakes
// every live waiter: 1.
const Script& latch_set();

// KEYS: latch, latch-waiters, latch-wake. dlock latch --down: counts down by one (keeping the
// expiry; at zero it stays), and the step to zero wakes every live waiter: the count left, or
// -1 if no latch is set.
const Script& latch_down();

// KEYS: history. ARGV: the event's text, max events, keep_ms. A lock's history
// (lock::History): appends the text to the stream, keeps its newest max events exactly and
// has it expire keep_ms after this event: 1, or the error of a key that is not a stream.
const Script& record();

// KEYS: history. ARGV: count, max_bytes. The newest count texts of the stream, newest first,
// leaving out those over max_bytes: {1, texts...}, {0} without one, {-1, type} for a key of
// another type (left alone).
const Script& history();

} // namespace dlock::redis::scripts
