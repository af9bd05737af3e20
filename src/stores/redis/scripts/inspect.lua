-- Read-only snapshot for status and list:
-- {exists, pttl, holder-hash, last fence, live waiters, server time ms}.
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local fence_key = KEYS[3]
local waiters_key = KEYS[4]
local queue_expiry_key = KEYS[5]

-- The server's clock, so that "held for" needs no client clock.
local now = server_now()
-- The holder's record, only while the lock exists.
local held = redis.call('EXISTS', lock_key)
local holder = {}
if held == 1 then
  holder = redis.call('HGETALL', holder_key)
end
-- Waiters whose registration has not lapsed, fair and unfair.
local waiters = redis.call('ZCOUNT', waiters_key, now, '+inf')
  + redis.call('ZCOUNT', queue_expiry_key, now, '+inf')
return {held, redis.call('PTTL', lock_key), holder, redis.call('GET', fence_key) or '0', waiters,
        string.format('%d', now)}
