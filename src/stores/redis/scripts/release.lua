-- Deletes the lock, or frees the token's --shared or --limit slot, while the token holds it
-- (any holder when forced), and wakes a waiter, every leader watcher, and every watcher (dlock
-- wait) once the key is free. Returns 0 if the token held nothing; 1 once it
-- is released and an unfair waiter (if any) woken; or, when the lock is now free and a --fair
-- waiter heads the queue, that waiter's id: its own wake list is a key this script cannot
-- declare, so the client wakes it with wake.lua. A release by the token before its --min-hold
-- is over keeps the lock, marked ended, until then: {ms left}.
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local waiters_key = KEYS[3]
local queue_key = KEYS[4]
local queue_expiry_key = KEYS[5]
local wake_key = KEYS[6]
local holders_key = KEYS[7]
local slots_key = KEYS[8]
local kind_key = KEYS[9]
local watchers_key = KEYS[10]
local watch_key = KEYS[11]
local leader_watchers_key = KEYS[12]
local leader_wake_key = KEYS[13]
local token = ARGV[1] -- '': force
local at_once = ARGV[2] == '1' -- a Redlock attempt given back: no --min-hold kept

local now = server_now()
reclaim_slots(holders_key, slots_key, kind_key, now)
-- Only the holder releases, unless forced.
local current = redis.call('GET', lock_key)
local slot_freed = false
if current and (token == '' or current == token) then
  local policy = holder_policy(holder_key)
  -- Released by its holder before its --min-hold is over (and not replaced, which frees it
  -- at once): kept, unrenewed, until hold_until; a clean end, so no --lock-delay.
  if token ~= '' and not at_once and not policy.replaced_by and policy.hold_until
     and policy.hold_until > now then
    if not policy.ended then
      local left = policy.hold_until - now
      redis.call('PEXPIRE', lock_key, left)
      redis.call('HSET', holder_key, 'ended', '1')
      redis.call('HDEL', holder_key, 'delay_ms', 'replaced_by')
      redis.call('PEXPIRE', holder_key, left)
    end
    return {redis.call('PTTL', lock_key)}
  end
  redis.call('DEL', lock_key)
  -- Forced: the holder's --lock-delay starts (its record lives that much longer); else gone.
  if token == '' and policy.delay_ms and not policy.ended then
    redis.call('HDEL', holder_key, 'replaced_by')
    redis.call('PEXPIRE', holder_key, policy.delay_ms)
  else
    redis.call('DEL', holder_key)
  end
elseif token == '' and delay_left(lock_key, holder_key) > 0 then
  -- Forced on a key free but for a --lock-delay: the delay is cleared.
  redis.call('DEL', holder_key)
elseif token == '' and redis.call('ZCARD', holders_key) > 0 then
  redis.call('DEL', holders_key, slots_key, kind_key)
elseif token ~= '' and redis.call('ZSCORE', holders_key, token) then
  redis.call('ZREM', holders_key, token)
  redis.call('HDEL', slots_key, token)
  reclaim_slots(holders_key, slots_key, kind_key, now)
  slot_freed = true
else
  return 0
end
-- Forget the waiters, fair and unfair, that stopped asking.
redis.call('ZREMRANGEBYSCORE', waiters_key, '-inf', '(' .. now)
forget_lapsed_fair_waiters(queue_key, queue_expiry_key, now)
-- Every leader watcher (dlock leader --watch) is woken: the holder that leads may be the one
-- that left.
wake_all(leader_watchers_key, leader_wake_key, now)
-- Other slot holders remain: one waiter may take the slot freed.
if slot_freed and redis.call('ZCARD', holders_key) > 0 then
  wake_waiter(waiters_key, wake_key, now)
  return 1
end
-- The key is free: every watcher (dlock wait) is woken, on its own list, so that none takes
-- the wake-up of a lock waiter.
wake_all(watchers_key, watch_key, now)
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
