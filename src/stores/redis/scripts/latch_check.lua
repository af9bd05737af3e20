-- dlock latch --wait: whether the latch's count is zero: {1, 0}. If not, or if no latch is set
-- yet, registers the waiter, so that the count's last step wakes it: {0, count (-1: none),
-- block_ms}.
local latch_key = KEYS[1]
local waiters_key = KEYS[2]
local waiter_id = ARGV[1]
local max_block_ms = tonumber(ARGV[2])

local now = server_now()
local count = redis.call('GET', latch_key)
if count and tonumber(count) <= 0 then
  redis.call('ZREM', waiters_key, waiter_id)
  return {1, 0}
end
-- Registered until 2s after its block ends, like a lock waiter.
redis.call('ZADD', waiters_key, now + max_block_ms + 2000, waiter_id)
keep_for(waiters_key, max_block_ms + 2000)
return {0, count and tonumber(count) or -1, max_block_ms}
