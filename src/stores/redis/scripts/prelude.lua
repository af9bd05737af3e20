-- Put before acquire.lua, release.lua and inspect.lua (see src/CMakeLists.txt), so that "now"
-- and "a fair waiter is gone" are defined once.

-- The server's clock in ms, and the TIME reply it comes from: {seconds, microseconds}.
local function server_now()
  local time = redis.call('TIME')
  return time[1] * 1000 + math.floor(time[2] / 1000), time
end

-- Removes the --fair waiters whose registration lapsed from the queue and the expiry set.
local function forget_lapsed_fair_waiters(queue_key, queue_expiry_key, now)
  local lapsed = redis.call('ZRANGEBYSCORE', queue_expiry_key, '-inf', '(' .. now)
  for i = 1, #lapsed do
    redis.call('ZREM', queue_key, lapsed[i])
    redis.call('ZREM', queue_expiry_key, lapsed[i])
  end
end
