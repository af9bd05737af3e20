#pragma once

#include "lock/holder.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// The node layout of Apache Curator's lock recipes (InterProcessMutex, InterProcessReadWriteLock),
// so that dlock and Curator users contend for one lock path: under the lock's node, each
// contender creates an ephemeral sequential child "_c_<uuid>-lock-<10 digits>" (Curator's
// protected mode: a create whose answer was lost is found again by its uuid); the lowest
// sequence holds, and each waiter watches only the node just before it.
//
// Curator's mutex sorts only the "lock-" nodes by sequence (any other name sorts after them
// all), and its read/write lock only the "__READ__" and "__WRIT__" ones: a lone node of either
// kind is invisible to the other recipe. So dlock's exclusive contender is a pair, made in one
// transaction (nothing comes between them): "_c_<uuid>-lock-<n>" for Curator's mutex and
// "_c_<uuid>-__WRIT__<n+1>" for its read and write locks; it holds when no other contender of
// any kind is before it, and every Curator holder on the path sees one of its nodes before
// its own. A candidate of dlock elect adds a third node to the transaction for Curator's
// LeaderLatch, which sorts only its "latch-" nodes: "_c_<uuid>-latch-<n+2>", with the --value as
// its data (the participant's id, as on its "lock-" node); dlock counts a LeaderLatch's lone
// "latch-" node as an exclusive contender.
namespace dlock::zookeeper {

// What a contender asks for: Curator's lock names.
enum class Role {
  exclusive, // "lock-"    (InterProcessMutex)
  read,      // "__READ__" (InterProcessReadWriteLock's read lock)
  write,     // "__WRIT__" (its write lock)
  latch,     // "latch-"   (LeaderLatch: a leader, exclusive)
};

// The lock node's name for dlock's prefix + name: '/', '%', space and bytes outside printable
// ASCII %-escaped (ZooKeeper refuses some of them), and "." or ".." escaped whole, so that any
// lock name is one safe path component.
std::string encode_name(std::string_view prefixed);
// The reverse; nullopt when name is not one encode_name makes.
std::optional<std::string> decode_name(std::string_view name);

// A random version-4 UUID, as Curator's protected mode names contenders.
std::string random_uuid();
// "_c_<uuid>-lock-" (or "-__READ__", "-__WRIT__", "-latch-"): what the server appends the
// sequence to.
std::string contender_prefix(std::string_view uuid, Role role);

// One child of a lock node, as its name says.
struct Contender {
  std::string name; // the child's name, e.g. "_c_…-lock-0000000007"
  std::int64_t sequence = 0;
  Role role = Role::exclusive;
  std::string uuid; // empty when not created in protected mode
  // dlock's exclusive pair: the "__WRIT__" node made with this "lock-" one (its sequence + 1,
  // the same uuid), one contender with it; "" for a lone node.
  std::string partner;
  // A dlock candidate's "latch-" node, made with its pair (sequence + 2, the same uuid); "" if
  // none.
  std::string latch;
};

// The child named name, or nullopt when it is no contender (a node of another recipe).
std::optional<Contender> parse_contender(std::string_view name);
// The contenders among children, in sequence order (the queue), dlock's pairs as one.
std::vector<Contender> sorted_contenders(const std::vector<std::string>& children);

// --limit N, as Curator's InterProcessSemaphoreV2 lays it out: under the lock's node, the
// mutex "locks" (an InterProcessMutex's "lock-" nodes) and "leases", where each holder has an
// ephemeral sequential "_c_<uuid>-lease-<10 digits>". A contender takes the mutex, makes its
// lease, and holds once "leases" has at most N leases; else it keeps both and waits for a
// change of leases' children; then it gives the mutex back. Curator counts every child of
// "leases"; dlock counts only lease nodes (another tenant's junk cannot shut it out).
inline constexpr std::string_view mutex_node = "locks";
inline constexpr std::string_view leases_node = "leases";
// "_c_<uuid>-lease-": what the server appends a lease's sequence to.
std::string lease_prefix(std::string_view uuid);
// The lease nodes among children, in sequence order (names only).
std::vector<std::string> sorted_leases(const std::vector<std::string>& children);
// A lease's record: the holder's, with the semaphore's size (a line "kind=limit:N").
std::string lease_record(const lock::HolderInfo& holder, std::string_view fingerprint, int limit);
// The N a lease's record says (0: none, as in a Curator lease, whose data is its address).
int lease_limit(std::string_view data);

// dlock barrier, as Curator's DistributedDoubleBarrier lays it out: each party an ephemeral
// child of the lock's node (Curator: a bare UUID; dlock: "_c_<uuid>-party-<10 digits>", with
// "parties=N" in its data), and "ready", which the last arrival makes (dlock: ephemeral, in the
// transaction that deletes the N parties it lets through, so later arrivals form the next
// generation). A dlock party passes when its node is deleted so, or when a Curator party made
// a persistent "ready" after it arrived.
inline constexpr std::string_view ready_node = "ready";
std::string party_prefix(std::string_view uuid);
// A barrier's parties among children, in arrival order (Curator's, which have no sequence,
// first): names only.
std::vector<std::string> sorted_parties(const std::vector<std::string>& children);
// dlock latch: "dlock.latch", a persistent child of the lock's node holding "dlock=1",
// "count=N" and "expires_at=MS" (the server's clock): set and counted down with versioned
// writes; the next dlock that finds it expired deletes it.
inline constexpr std::string_view latch_node = "dlock.latch";
struct LatchRecord {
  std::int64_t count = 0;
  std::int64_t expires_at = 0;
};
std::string latch_record(const LatchRecord& record);
std::optional<LatchRecord> parse_latch_record(std::string_view data);
// A "key=N" line of a dlock record (parties=, count=...), if data is dlock's and has it.
std::optional<std::int64_t> record_number(std::string_view data, std::string_view key);

// Whether the contender at index ours holds the lock, and, if not, which one it waits for:
// an exclusive or write contender waits for the one just before it; a reader for the first
// writer (or exclusive) before it, as Curator's read lock does.
struct Verdict {
  bool holds = false;
  std::size_t wait_for = 0; // when not: the index of the node to watch
};
Verdict judge(const std::vector<Contender>& queue, std::size_t ours);
// The indexes of the contenders that hold the lock: the first, or every reader before the
// first writer.
std::vector<std::size_t> holding(const std::vector<Contender>& queue);

// The node's data: who holds it and the fingerprint of its token, one "key=value" per line.
std::string holder_record(const lock::HolderInfo& holder, std::string_view fingerprint);
// The data of an exclusive contender's "lock-" node: a candidate's value (dlock elect --value),
// which Curator's LeaderSelector reads as the participant's id (getLeader().getId()), else
// record (its "__WRIT__" partner always has the record: dlock reads the holder there).
std::string lock_node_data(const lock::HolderInfo& holder, const std::string& record);
// What a leader proclaims, as dlock accepts it from any node: data that is non-empty, at most
// lock::max_holder_field_bytes, valid UTF-8 without control characters; else nullopt.
std::optional<std::string> proclamation(std::string_view data);
// The record read back (fingerprint, when given, gets the token's); a node dlock did not
// write (Curator's holds the client's address or a LeaderSelector's id, another tenant's may be
// anything, longer than lock::max_holder_record_bytes, or fields dlock would not write) is
// HolderInfo::not_dlock() with its data as the value when that is a proclamation, else with the
// start of its data in the command. A dlock record's value that is none is dropped.
lock::HolderInfo parse_holder_record(std::string_view data, std::string* fingerprint = nullptr);
// The side nodes of dlock's policies, children of the lock's node beside the contenders. Their
// names hold none of Curator's markers ("lock-", "__READ__", "__WRIT__"), so its recipes sort
// them whole, after every sequence number (a letter sorts after a digit): never a contender.
inline constexpr std::string_view policy_node = "dlock.policy";       // --min-hold, --lock-delay
inline constexpr std::string_view replace_node = "dlock.replace";     // --replace's request
inline constexpr std::string_view supersede_node = "dlock.supersede"; // the newest --supersede
inline constexpr std::string_view clock_node = "dlock.now-";          // + uuid: the server's time
// The longest --min-hold or --lock-delay a policy record may carry: more is not dlock's.
inline constexpr std::int64_t max_policy_ms = 366LL * 24 * 3600 * 1000;

// A side node's record: "dlock=1", the holder fields of who wrote it (the holder, the replacer,
// the newest waiter) and the fields of its kind, one "key=value" per line.
struct SideRecord {
  lock::HolderInfo holder;
  std::string token;              // policy: the holder's token's fingerprint
  std::string node;               // policy: the holder's contender; replace: the one asked
  std::string waiter;             // supersede: the newest waiter's id
  std::int64_t min_hold_ms = 0;   // policy: held at least this long from the node's ctime
  std::int64_t lock_delay_ms = 0; // policy: the holder's --lock-delay
  bool released = false;          // policy: released by its token (the delay is disarmed)
  std::int64_t ended_at = 0;      // policy: when the holder was found gone unreleased (0: not yet)
};
std::string side_record(const SideRecord& record);
// The record read back; nullopt when dlock did not write it: larger than
// lock::max_holder_record_bytes, not starting "dlock=1", a field out of range or malformed.
std::optional<SideRecord> parse_side_record(std::string_view data);

// A lock's history (dlock history): the node of the lock's node's name followed by "%history"
// (never a name encode_name makes, so no lock's node and never a contender: Curator's recipes
// do not look there), with a persistent sequential child per event, "e-<16 digits: this host's
// Unix ms>-<10 digits>", whose data is the event's text; the ms let a write find the events past
// lock::history_keep by their names alone.
inline constexpr std::string_view history_suffix = "%history";
// "e-<16 digits>-": what the server appends an event's sequence to.
std::string history_event_prefix(std::int64_t unix_ms);
// One event node's name as a history node's listing gives it.
struct HistoryNode {
  std::string name;
  std::int64_t at_ms = 0;    // the ms in its name
  std::int64_t sequence = 0; // the server's
};
// The event nodes among children, oldest (lowest sequence) first; other names are passed over.
std::vector<HistoryNode> sorted_history(const std::vector<std::string>& children);

// Records carry the token's fingerprint, 16 hex digits (not the token: any client may read nodes).
using lock::token_fingerprint;

} // namespace dlock::zookeeper
