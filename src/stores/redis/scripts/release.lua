-- Deletes the lock while the token holds it (any holder when forced) and wakes one waiter.
-- Returns 0 if the token did not hold it; 1 once it is deleted and an unfair waiter (if any)
-- woken; or, when a --fair waiter heads the queue, that waiter's id: its own wake list is a key
-- this script cannot declare, so the client wakes it with wake.lua.
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local waiters_key = KEYS[3]
local queue_key = KEYS[4]
local queue_expiry_key = KEYS[5]
local wake_key = KEYS[6]
local token = ARGV[1] -- '': force

-- Only the holder releases, unless forced.
local current = redis.call('GET', lock_key)
if not current or (token ~= '' and current ~= token) then
  return 0
end
redis.call('DEL', lock_key, holder_key)
-- Forget the waiters, fair and unfair, that stopped asking.
local now = server_now()
redis.call('ZREMRANGEBYSCORE', waiters_key, '-inf', '(' .. now)
forget_lapsed_fair_waiters(queue_key, queue_expiry_key, now)
-- The head of the fair queue goes first; the client wakes it on its own list.
local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
if head then
  return head
end
-- Else one unfair waiter on the shared list: one wake-up at a time, expiring if nobody takes it.
if redis.call('ZCARD', waiters_key) > 0 and redis.call('LLEN', wake_key) == 0 then
  redis.call('RPUSH', wake_key, '1')
  redis.call('PEXPIRE', wake_key, 60000)
end
return 1
