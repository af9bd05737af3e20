#include "lock/scripts.hpp"

#include <string>
#include <string_view>

namespace dlock::lock::scripts {

namespace {

// Shared by the scripts that need it, so that "now" and "a fair waiter is gone" are defined
// once: the server's clock in ms, and the removal of --fair waiters whose registration lapsed.
constexpr std::string_view prelude = R"lua(
local function server_now()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000), t
end
local function forget_lapsed_fair_waiters(queue, expiry, now)
  local lapsed = redis.call('ZRANGEBYSCORE', expiry, '-inf', '(' .. now)
  for i = 1, #lapsed do
    redis.call('ZREM', queue, lapsed[i])
    redis.call('ZREM', expiry, lapsed[i])
  end
end
)lua";

redis::Script with_prelude(std::string_view body)
{
  return redis::Script(std::string(prelude) + std::string(body));
}

} // namespace

const redis::Script& acquire()
{
  static const redis::Script script = with_prelude(R"lua(
local now, t = server_now()
local id, mode, max_block = ARGV[7], ARGV[8], tonumber(ARGV[9])
forget_lapsed_fair_waiters(KEYS[5], KEYS[6], now)
if mode == 'fair' and not redis.call('ZSCORE', KEYS[5], id) then
  redis.call('ZADD', KEYS[5], t[1] * 1000000 + t[2], id)
end
local head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
if (head == nil or head == id) and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  -- The fencing counter counts on by one while it exists. A missing one (never used, expired,
  -- or lost to a restart without persistence, an eviction or a failover) restarts at the
  -- server's clock in microseconds: a counter started at the clock grows by one per
  -- acquisition, far slower than the clock, so this is above every token it can have issued.
  -- That lets it expire like every other key. Exact in Lua's doubles (below 2^53 until 2255).
  local last = redis.call('GET', KEYS[2])
  local fence = last and tonumber(last) + 1 or t[1] * 1000000 + t[2]
  local fence_text = string.format('%d', fence)
  redis.call('SET', KEYS[2], fence_text, 'PX', math.max(7 * 86400000, 2 * tonumber(ARGV[2])))
  redis.call('HSET', KEYS[3], 'host', ARGV[3], 'pid', ARGV[4], 'user', ARGV[5],
             'command', ARGV[6], 'acquired_ms', string.format('%d', now), 'fence', fence_text,
             'ttl_ms', ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  if mode == 'fair' then
    redis.call('ZREM', KEYS[5], id)
    redis.call('ZREM', KEYS[6], id)
  elseif mode == 'wait' then
    redis.call('ZREM', KEYS[4], id)
  end
  return {1, fence}
end
local pttl = redis.call('PTTL', KEYS[1])
local block = math.min(1000, max_block)
if mode == 'wait' and pttl > 0 then
  block = math.min(pttl, max_block)
end
local function register(key, expires)
  redis.call('ZADD', key, expires, id)
  if redis.call('PTTL', key) < expires - now then
    redis.call('PEXPIRE', key, expires - now)
  end
end
if mode == 'fair' then
  register(KEYS[6], now + block + 2000)
  if redis.call('PTTL', KEYS[5]) < block + 2000 then
    redis.call('PEXPIRE', KEYS[5], block + 2000)
  end
elseif mode == 'wait' then
  register(KEYS[4], now + block + 2000)
end
return {0, pttl, redis.call('HGETALL', KEYS[3]), block}
)lua");
  return script;
}

const redis::Script& renew()
{
  static const redis::Script script(R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local ttl = ARGV[2]
if ttl == '' then
  ttl = redis.call('HGET', KEYS[2], 'ttl_ms') or redis.call('PTTL', KEYS[1])
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[2], 'ttl_ms', ttl)
end
return 1
)lua");
  return script;
}

const redis::Script& release()
{
  static const redis::Script script = with_prelude(R"lua(
local current = redis.call('GET', KEYS[1])
if not current or (ARGV[1] ~= '' and current ~= ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
local now = server_now()
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)
forget_lapsed_fair_waiters(KEYS[4], KEYS[5], now)
local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
local wake = nil
if head then
  wake = KEYS[1] .. ':wake:' .. head
elseif redis.call('ZCARD', KEYS[3]) > 0 then
  wake = KEYS[6]
end
if wake and redis.call('LLEN', wake) == 0 then
  redis.call('RPUSH', wake, '1')
  redis.call('PEXPIRE', wake, 60000)
end
return 1
)lua");
  return script;
}

const redis::Script& inspect()
{
  static const redis::Script script = with_prelude(R"lua(
local now = server_now()
local held = redis.call('EXISTS', KEYS[1])
local holder = {}
if held == 1 then
  holder = redis.call('HGETALL', KEYS[2])
end
local waiters = redis.call('ZCOUNT', KEYS[4], now, '+inf') + redis.call('ZCOUNT', KEYS[5], now, '+inf')
return {held, redis.call('PTTL', KEYS[1]), holder, redis.call('GET', KEYS[3]) or '0', waiters,
        string.format('%d', now)}
)lua");
  return script;
}

} // namespace dlock::lock::scripts
