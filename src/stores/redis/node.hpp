#pragma once

#include "lock/store.hpp"

#include <cstdint>

namespace dlock::redis {

// One of Redlock's masters (a RedisStore): a store whose lock's fencing counter can be raised,
// which only a store made of several needs.
class Node : public lock::Store {
public:
  // Raises the lock's fencing counter to at least at_least (Outcome::Op::raise_fence): the
  // next majority shares a node with this one, so its token is larger.
  virtual void start_raise_fence(const lock::LockName& name, std::int64_t at_least) = 0;
  // Gives back a lock the token took in an attempt that reached no majority (Op::release): at
  // once, keeping no --min-hold, so that contenders that split the nodes do not close them.
  virtual void start_give_back(const lock::LockName& name, const std::string& token) = 0;
};

} // namespace dlock::redis
