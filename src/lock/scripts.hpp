#pragma once

#include "redis/script.hpp"

namespace dlock::lock::scripts {

// KEYS: lock, fence, holder. ARGV: token, ttl_ms, host, pid, user, command.
// Takes the lock if free and, atomically with it, bumps the fencing counter and stores the
// holder metadata. Returns {1, fence} when taken, {0, pttl, holder-hash} when held.
const redis::Script& acquire();

// KEYS: lock, holder. ARGV: token, ttl_ms. Extends the lease only while token holds it: 1 or 0.
const redis::Script& renew();

// KEYS: lock, holder. ARGV: token. Deletes the lock only while token holds it: 1 or 0.
const redis::Script& release();

} // namespace dlock::lock::scripts
