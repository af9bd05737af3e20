#include "lock/scripts.hpp"

namespace dlock::lock::scripts {

const redis::Script& acquire()
{
  static const redis::Script script(R"lua(
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('INCR', KEYS[2])
  local now = redis.call('TIME')
  local acquired_ms = string.format('%d%03d', now[1], math.floor(now[2] / 1000))
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], 'token', ARGV[1], 'host', ARGV[3], 'pid', ARGV[4],
             'user', ARGV[5], 'command', ARGV[6], 'acquired_ms', acquired_ms,
             'fence', fence, 'ttl_ms', ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[3])}
)lua");
  return script;
}

const redis::Script& renew()
{
  static const redis::Script script(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
)lua");
  return script;
}

const redis::Script& release()
{
  static const redis::Script script(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
)lua");
  return script;
}

} // namespace dlock::lock::scripts
