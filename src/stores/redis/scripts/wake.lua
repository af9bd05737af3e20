-- Wakes one --fair waiter, the head of the queue when the lock was released, on its own list
-- (KEYS[1]): one wake-up at a time, expiring if nobody takes it. Returns 1.
local wake_key = KEYS[1]
if redis.call('LLEN', wake_key) == 0 then
  redis.call('RPUSH', wake_key, '1')
  redis.call('PEXPIRE', wake_key, 60000)
end
return 1
