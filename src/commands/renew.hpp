#pragma once

#include "commands/context.hpp"
#include "lock/lease.hpp"
#include "lock/name.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dlock::commands {

// `dlock renew --key K... --token T [--ttl D]`
struct RenewOptions {
  std::vector<lock::LockName> keys;
  std::string token{};
  std::optional<util::Millis> ttl{}; // nullopt: the holder's own lease length
  lock::ReplicaAck replicas{};       // --wait-replicas: the renewal counts once they have it
};

// `dlock renew`: extends the lease if the token still holds it; 0, or 76 if not, or 69 if
// it did not reach the --wait-replicas in time.
int renew(Context& context, const RenewOptions& options);

} // namespace dlock::commands
