#include "commands/lock_request.hpp"

#include <utility>

namespace dlock::commands {

hold::WaitPolicy LockRequestOptions::wait_policy(util::Millis request_timeout) const
{
  hold::WaitPolicy waiting = hold::make_wait_policy(no_wait, fair, wait, request_timeout);
  waiting.replicas = replicas;
  waiting.kind = kind;
  return waiting;
}

lock::AcquireRequest LockRequestOptions::acquire_request(std::string token,
                                                         lock::HolderInfo holder) const
{
  holder.note = note;
  holder.value = value;
  return lock::AcquireRequest{.token = std::move(token),
                              .ttl = ttl,
                              .ttl_given = ttl_given,
                              .holder = std::move(holder),
                              .ticket = {},
                              .ack = {},
                              .kind = {},
                              .policy = policy};
}

} // namespace dlock::commands
