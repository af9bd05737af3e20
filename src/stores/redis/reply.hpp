#pragma once

#include "lock/holder.hpp"
#include "util/error.hpp"

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>

namespace dlock::redis {

// Frees a hiredis reply tree.
struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};

// One reply, owned.
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// Maps a Redis error reply to the contract's exit status: NOAUTH/WRONGPASS/NOPERM are 77,
// LOADING/READONLY/MASTERDOWN/BUSY/CLUSTERDOWN/TRYAGAIN/OOM are 69 (the service cannot serve
// now), anything else 70. The code is found past a script's wrapper too.
ExitCode classify_error(std::string_view message);

// Whether an error reply means "authenticate first", so a client that sent no password can
// say how to give one instead of showing Redis's words (NOAUTH, "unauthenticated multibulk").
bool asks_for_password(std::string_view message);

// Whether an error reply says the node cannot take writes because it is not (or no longer)
// a master: READONLY, or MASTERDOWN (a replica that lost its master).
bool is_not_master(const redisReply& reply);

// Throws the classified Error if reply is an error reply; `what` names the request.
void throw_if_error(const redisReply& reply, std::string_view what);

// A short description of a reply for "unexpected reply" messages.
std::string describe(const redisReply& reply);

// The integer in an integer reply; throws Error(internal) for anything else.
long long expect_integer(const redisReply& reply, std::string_view what);

// The holder metadata from a script's flat field/value array (holder_record in prelude.lua);
// a record dlock did not write (oversized, malformed) is HolderInfo::not_dlock(), never a throw.
lock::HolderInfo holder_from_hash(const redisReply& reply);

} // namespace dlock::redis
