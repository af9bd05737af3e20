-- Takes the lock, its next fencing token and the holder's record, or registers the waiter.
-- What it answers is described in scripts.hpp.
local lock_key = KEYS[1]
local fence_key = KEYS[2]
local holder_key = KEYS[3]
local waiters_key = KEYS[4]
local queue_key = KEYS[5]
local queue_expiry_key = KEYS[6]
local token = ARGV[1]
local ttl_ms = ARGV[2]
local host = ARGV[3]
local pid = ARGV[4]
local user = ARGV[5]
local command = ARGV[6]
local waiter_id = ARGV[7]
local mode = ARGV[8] -- 'wait', 'fair' or 'once'
local max_block_ms = tonumber(ARGV[9])

-- The server's clock in ms, and in microseconds: the queue's order, a lost counter's restart.
local now, time = server_now()
local now_us = time[1] * 1000000 + time[2]
-- Forget the fair waiters that stopped asking.
forget_lapsed_fair_waiters(queue_key, queue_expiry_key, now)
-- A fair waiter queues up on its first attempt.
if mode == 'fair' and not redis.call('ZSCORE', queue_key, waiter_id) then
  redis.call('ZADD', queue_key, now_us, waiter_id)
end
-- Take the lock if it is free and no fair waiter is ahead of this one.
local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
if (head == nil or head == waiter_id) and redis.call('SET', lock_key, token, 'NX', 'PX', ttl_ms) then
  -- The fencing counter counts on by one while it exists. A missing one (never used, expired,
  -- or lost to a restart without persistence, an eviction or a failover) restarts at the
  -- server's clock in microseconds: a counter started at the clock grows by one per
  -- acquisition, far slower than the clock, so this is above every token it can have issued.
  -- That lets it expire like every other key. Exact in Lua's doubles (below 2^53 until 2255).
  local last = redis.call('GET', fence_key)
  local fence = last and tonumber(last) + 1 or now_us
  local fence_text = string.format('%d', fence)
  redis.call('SET', fence_key, fence_text, 'PX', math.max(7 * 86400000, 2 * tonumber(ttl_ms)))
  -- Record the holder for status and list; it expires with the lock.
  redis.call('HSET', holder_key, 'host', host, 'pid', pid, 'user', user,
             'command', command, 'acquired_ms', string.format('%d', now), 'fence', fence_text,
             'ttl_ms', ttl_ms)
  redis.call('PEXPIRE', holder_key, ttl_ms)
  -- The waiter is served: take it out of the queue or the waiters set.
  if mode == 'fair' then
    redis.call('ZREM', queue_key, waiter_id)
    redis.call('ZREM', queue_expiry_key, waiter_id)
  elseif mode == 'wait' then
    redis.call('ZREM', waiters_key, waiter_id)
  end
  return {1, fence}
end
-- Not taken: block until the lease ends (mode 'wait'), else for at most a second.
local pttl = redis.call('PTTL', lock_key)
local block_ms = math.min(1000, max_block_ms)
if mode == 'wait' and pttl > 0 then
  block_ms = math.min(pttl, max_block_ms)
end
-- Adds the waiter to a set scored by when its registration lapses; the set lives as long.
local function register(key, expires)
  redis.call('ZADD', key, expires, waiter_id)
  if redis.call('PTTL', key) < expires - now then
    redis.call('PEXPIRE', key, expires - now)
  end
end
-- Register the waiter until 2s after its block ends, so that a release wakes it.
if mode == 'fair' then
  register(queue_expiry_key, now + block_ms + 2000)
  if redis.call('PTTL', queue_key) < block_ms + 2000 then
    redis.call('PEXPIRE', queue_key, block_ms + 2000)
  end
elseif mode == 'wait' then
  register(waiters_key, now + block_ms + 2000)
end
return {0, pttl, redis.call('HGETALL', holder_key), block_ms}
