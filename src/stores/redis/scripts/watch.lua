-- dlock wait: whether the lock is free, or was freed since the watcher first found it held;
-- if not, registers the watcher, so that the release that frees the key wakes it, and says how
-- long to block: until the holder's lease ends at most. What it answers is in scripts.hpp.
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local holders_key = KEYS[3]
local slots_key = KEYS[4]
local watchers_key = KEYS[5]
local freed_key = KEYS[6]
local watcher_id = ARGV[1]
local since = tonumber(ARGV[2]) -- server µs of the first attempt that found it held; 0: none yet
local max_block_ms = tonumber(ARGV[3])

local now, time = server_now()
-- Free: no exclusive holder, and no slot holder whose lease has not ended (read only: the
-- next acquisition frees the ended ones). Freed: taken from free since the first attempt.
local held = redis.call('EXISTS', lock_key) == 1
local slots = redis.call('ZCOUNT', holders_key, '(' .. now, '+inf')
local freed = since > 0 and tonumber(redis.call('GET', freed_key) or '0') > since
if (not held and slots == 0) or freed then
  if since > 0 then
    redis.call('ZREM', watchers_key, watcher_id)
  end
  return {1}
end
-- Who holds it, and how long at most: the exclusive holder, else the slot holder whose lease
-- ends last.
local pttl, holder
if held then
  pttl = redis.call('PTTL', lock_key)
  holder = holder_record(holder_key)
else
  local last = redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')
  pttl = math.max(1, tonumber(last[2]) - now)
  holder = slot_record(slots_key, last[1])
end
local block_ms = max_block_ms
if pttl > 0 then
  block_ms = math.min(pttl, max_block_ms)
end
-- Registered until 2s after its block ends, like a lock waiter.
redis.call('ZADD', watchers_key, now + block_ms + 2000, watcher_id)
keep_for(watchers_key, block_ms + 2000)
if since == 0 then
  since = time[1] * 1000000 + time[2]
end
return {0, pttl, holder, block_ms, slots, since}
