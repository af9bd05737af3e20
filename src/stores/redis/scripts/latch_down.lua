-- dlock latch --down: counts the latch down by one, keeping its expiry; the step to zero wakes
-- every live waiter, one wake-up each. At zero it stays there. Returns the count left, or -1
-- if no latch is set.
local latch_key = KEYS[1]
local waiters_key = KEYS[2]
local wake_key = KEYS[3]

local count = redis.call('GET', latch_key)
if not count then
  return -1
end
count = tonumber(count)
if count > 0 then
  count = redis.call('DECR', latch_key)
  if count == 0 then
    wake_all(waiters_key, wake_key, server_now())
  end
end
return count
