-- Read-only snapshot for status and list: {exists, pttl, holder-hash, last fence, live
-- waiters, server time ms, kind, slots, ended, delay}; kind is '' for the exclusive lock, else
-- 'shared' or 'limit:N', and slots is {pttl, record} for each --shared or --limit holder, by
-- lease end; ended is 1 when the holder released a lock kept for its --min-hold; delay, what
-- is left of a --lock-delay (ms) while the key is free (the holder-hash is the vanished one).
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local fence_key = KEYS[3]
local waiters_key = KEYS[4]
local queue_expiry_key = KEYS[5]
local holders_key = KEYS[6]
local slots_key = KEYS[7]
local kind_key = KEYS[8]

-- The server's clock, so that "held for" needs no client clock.
local now = server_now()
-- The holder's record, only while the lock exists.
local held = redis.call('EXISTS', lock_key)
local holder = {}
local ended = 0
local delay = delay_left(lock_key, holder_key)
if held == 1 then
  holder = holder_record(holder_key, holder_fields_with_value)
  ended = holder_policy(holder_key).ended and 1 or 0
elseif delay > 0 then
  holder = holder_record(holder_key, holder_fields_with_value)
end
-- The slot holders whose lease has not ended (ended ones are freed by the next write).
local slots = {}
local live = redis.call('ZRANGEBYSCORE', holders_key, '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live - 1, 2 do
  slots[#slots + 1] = {string.format('%d', tonumber(live[i + 1]) - now),
                       slot_record(slots_key, live[i])}
end
local kind = ''
if #slots > 0 then
  kind = kind_in_use(kind_key) or ''
end
-- Waiters whose registration has not lapsed, fair and unfair.
local waiters = redis.call('ZCOUNT', waiters_key, now, '+inf')
  + redis.call('ZCOUNT', queue_expiry_key, now, '+inf')
-- The fencing counter: '?' when it holds a value dlock did not write (the client shows unknown).
local fence = '0'
if redis.call('EXISTS', fence_key) == 1 then
  local counter = read_counter(fence_key)
  fence = counter and string.format('%d', counter) or '?'
end
return {held, redis.call('PTTL', lock_key), holder, fence, waiters,
        string.format('%d', now), kind, slots, ended, delay}
