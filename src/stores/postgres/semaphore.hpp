#pragma once

#include "stores/postgres/advisory.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace dlock::postgres {

// --limit N on PostgreSQL: N advisory locks of the two-int4 form (pg_locks' objsubid 2),
// beside the name's own bigint key K (objsubid 1), so that no other name's key is touched:
//   slot i (0 <= i < N): (classid(K), objid(K) + 1 + i), taken exclusive by one holder each;
//   the kind marker:     (classid(K), objid(K) - N), taken shared by every holder (and waiter)
//                        of the semaphore, which tells other dlocks that the name is a
//                        semaphore of N (objid wraps modulo 2^32).
// A holder takes the marker, then checks that no other kind holds the name (K, or a marker of
// another N), then takes the first free slot; an exclusive or shared holder takes K, then
// checks that no marker is held: each takes before it looks, so two kinds never both hold.
// A slot goes with its holder's session, as the lock does (kill -9, a lost connection).
struct Semaphore {
  AdvisoryKey key;
  int limit = 2;

  // The largest N (--limit's range).
  static constexpr std::int64_t max_limit = 1'000'000;

  // classid(K) as int4, as pg_try_advisory_lock(int4, int4) takes it.
  std::int32_t class_arg() const noexcept { return std::int32_t(key.classid()); }
  // The marker's second int4.
  std::int32_t marker_arg() const noexcept
  {
    return std::int32_t(key.objid() - std::uint32_t(limit));
  }
  // Slot i's second int4.
  std::int32_t slot_arg(int i) const noexcept
  {
    return std::int32_t(key.objid() + 1 + std::uint32_t(i));
  }

  // How far pg_locks' objid (oid column objid) is from objid(K), modulo 2^32, in SQL; $2 is
  // objid(K) as an unsigned number.
  static std::string offset_sql(const char* objid_column);
  // The int4 of slot (objid(K) + 1 + i) in SQL, for i an SQL expression; $2 as above.
  static std::string slot_arg_sql(const char* i);
  // What an offset (offset_sql) is: slot i, or the marker of a semaphore of n.
  static std::optional<int> slot_of(std::int64_t offset);
  static std::optional<int> limit_of_marker(std::int64_t offset);
};

} // namespace dlock::postgres
