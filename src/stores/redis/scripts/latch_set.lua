-- dlock latch --count: sets the latch to a count, expiring after expire_ms (a latch set before
-- starts again); a count of zero wakes every live waiter at once, as the last count-down does.
-- Returns 1.
local latch_key = KEYS[1]
local waiters_key = KEYS[2]
local wake_key = KEYS[3]
local count = tonumber(ARGV[1])
local expire_ms = ARGV[2]

redis.call('SET', latch_key, string.format('%d', count), 'PX', expire_ms)
if count == 0 then
  wake_all(waiters_key, wake_key, server_now())
end
return 1
