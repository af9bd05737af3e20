#pragma once

#include "lock/holder.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dlock::postgres {

// A lock name's PostgreSQL advisory lock key: the first 8 bytes of SHA-256(prefix + name),
// big-endian, as a signed bigint, so that psql can take the same lock:
//   SELECT ('x' || left(encode(sha256('dlock:NAME'), 'hex'), 16))::bit(64)::bigint
// pg_locks shows it split in two: classid (high 32 bits) and objid (low 32 bits), objsubid 1.
struct AdvisoryKey {
  std::int64_t key = 0;

  static AdvisoryKey of(std::string_view prefixed_name);
  std::uint32_t classid() const noexcept { return std::uint32_t(std::uint64_t(key) >> 32); }
  std::uint32_t objid() const noexcept { return std::uint32_t(std::uint64_t(key)); }
};

// The application_name of dlock's sessions: "dlock FINGERPRINT user@host:pid", at most 63
// bytes (the server cuts longer ones). FINGERPRINT (16 hex digits of SHA-256 of the token)
// lets another dlock process that was given the token (a nested run) find the session that
// holds the lock, without the token itself ever reaching the server.
std::string application_name(const std::string& token, const lock::HolderInfo& me);
using lock::token_fingerprint;

// Who holds a lock, from the holding session's row of pg_stat_activity: a dlock session's
// application_name gives back its user, host and pid; any other session (psql, an
// application) is shown by its client address, role, backend pid and application_name.
lock::HolderInfo holder_of_session(std::string_view application_name, std::string_view role,
                                   std::string_view client_address, std::int64_t backend_pid);

} // namespace dlock::postgres
