-- Wakes the waiters of one list (KEYS[1]): a --fair waiter, the head of the queue when the
-- lock was released, on its own list; or the other parties of a barrier generation that
-- tripped, on that generation's list. Tops the list up to ARGV[1] wake-ups (default 1), which
-- expire if nobody takes them. Returns 1.
local wake_key = KEYS[1]
local want = tonumber(ARGV[1] or '1')
local missing = want - redis.call('LLEN', wake_key)
if missing > 0 then
  push_wakeups(wake_key, missing)
end
return 1
