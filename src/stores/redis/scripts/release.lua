-- Deletes the lock while the token holds it (any holder when forced) and wakes one waiter:
-- 1, else 0.
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local waiters_key = KEYS[3]
local queue_key = KEYS[4]
local queue_expiry_key = KEYS[5]
local wake_key = KEYS[6]
local token = ARGV[1] -- '': force
local fair_wake_prefix = ARGV[2] -- + a --fair waiter's id: that waiter's own wake list

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
-- Wake the head of the fair queue on its own list, else one unfair waiter on the shared one.
local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
local wake = nil
if head then
  wake = fair_wake_prefix .. head
elseif redis.call('ZCARD', waiters_key) > 0 then
  wake = wake_key
end
-- One wake-up at a time, and it expires if nobody takes it.
if wake and redis.call('LLEN', wake) == 0 then
  redis.call('RPUSH', wake, '1')
  redis.call('PEXPIRE', wake, 60000)
end
return 1
