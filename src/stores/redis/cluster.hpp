#pragma once

#include "stores/redis/reply.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::redis {

// Redis Cluster's hash slots, and the replies with which a node sends a client elsewhere.

constexpr int cluster_slots = 16384;

// The slot of a key: CRC16 of its hash tag ({...}) if it has a non-empty one, else of the key.
int key_slot(std::string_view key);

// A node's answer that the key lives elsewhere: MOVED (for good: learn it) or ASK (during a
// migration: this one command, preceded by ASKING).
struct Redirect {
  bool ask = false;
  int slot = 0;
  std::string host;
  int port = 0;

  std::string address() const { return fmt::format("{}:{}", host, port); }
};

// A redirect met by a blocking request (status, list), thrown for the caller to follow.
class Redirected : public Error {
public:
  explicit Redirected(Redirect redirect)
    : Error(ExitCode::unavailable, "the cluster redirected a request to {} too many times",
            redirect.address()),
      m_redirect(std::move(redirect))
  {
  }
  const Redirect& redirect() const noexcept { return m_redirect; }

private:
  Redirect m_redirect;
};

// The redirect in an error reply ("MOVED 3999 127.0.0.1:6381"), if it is one.
std::optional<Redirect> parse_redirect(const redisReply& reply);

// Whether the reply is TRYAGAIN: a multi-key command during a slot's migration, while its
// keys are split between two nodes; the client retries shortly.
bool is_try_again(const redisReply& reply);

// A range of slots and the address of the master serving it.
struct SlotRange {
  int first = 0;
  int last = 0;
  std::string host;
  int port = 0;
};

// The slot map in a CLUSTER SLOTS reply; nullopt when the server is not in cluster mode (or
// the user may not ask it: then it is treated as a single node). Throws on other errors.
std::optional<std::vector<SlotRange>> parse_cluster_slots(const redisReply& reply);

} // namespace dlock::redis
