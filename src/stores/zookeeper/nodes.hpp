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
namespace dlock::zookeeper {

// What a contender asks for: Curator's lock names.
enum class Role {
  exclusive, // "lock-"    (InterProcessMutex)
  read,      // "__READ__" (InterProcessReadWriteLock's read lock)
  write,     // "__WRIT__" (its write lock)
};

// The lock node's name for dlock's prefix + name: '/', '%', space and bytes outside printable
// ASCII %-escaped (ZooKeeper refuses some of them), and "." or ".." escaped whole, so that any
// lock name is one safe path component.
std::string encode_name(std::string_view prefixed);
// The reverse; nullopt when name is not one encode_name makes.
std::optional<std::string> decode_name(std::string_view name);

// A random version-4 UUID, as Curator's protected mode names contenders.
std::string random_uuid();
// "_c_<uuid>-lock-" (or "-__READ__", "-__WRIT__"): what the server appends the sequence to.
std::string contender_prefix(std::string_view uuid, Role role);

// One child of a lock node, as its name says.
struct Contender {
  std::string name; // the child's name, e.g. "_c_…-lock-0000000007"
  std::int64_t sequence = 0;
  Role role = Role::exclusive;
  std::string uuid; // empty when not created in protected mode
};

// The child named name, or nullopt when it is no contender (a node of another recipe).
std::optional<Contender> parse_contender(std::string_view name);
// The contenders among children, in sequence order (the queue).
std::vector<Contender> sorted_contenders(const std::vector<std::string>& children);

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
// The record read back (fingerprint, when given, gets the token's); a node dlock did not
// write (Curator's holds the client's address, another tenant's may be anything, longer than
// lock::max_holder_record_bytes, or fields dlock would not write) shows the start of its data as
// the command.
lock::HolderInfo parse_holder_record(std::string_view data, std::string* fingerprint = nullptr);
// Records carry the token's fingerprint, 16 hex digits (not the token: any client may read nodes).
using lock::token_fingerprint;

} // namespace dlock::zookeeper
