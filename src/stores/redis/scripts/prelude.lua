-- Put before acquire.lua, renew_slot.lua, release.lua and inspect.lua (see src/CMakeLists.txt), so
-- that "now", "a fair waiter is gone" and "a slot's lease ended" are defined once.

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

-- Gives key at least ms to live (a key without expiry gets one).
local function keep_for(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Frees the slots of --shared and --limit holders whose lease ended (the holders set is
-- scored by lease end on the server's clock), so a holder that died without releasing frees
-- its slot without any sweeper; once none is left, the kind in use is forgotten too.
local function reclaim_slots(holders_key, slots_key, kind_key, now)
  local ended = redis.call('ZRANGEBYSCORE', holders_key, '-inf', now)
  for i = 1, #ended do
    redis.call('ZREM', holders_key, ended[i])
    redis.call('HDEL', slots_key, ended[i])
  end
  -- (Only written when there is something to delete: a script that writes nothing before its
  -- first write may still be refused whole when the server is out of memory.)
  if redis.call('ZCARD', holders_key) == 0 and redis.call('EXISTS', slots_key, kind_key) > 0 then
    redis.call('DEL', slots_key, kind_key)
  end
end

-- Wakes one more live waiter on the shared wake list, unless every live waiter has a wake-up
-- pending already: one per freed slot, expiring if nobody takes it.
local function wake_waiter(waiters_key, wake_key, now)
  if redis.call('ZCOUNT', waiters_key, now, '+inf') > redis.call('LLEN', wake_key) then
    redis.call('RPUSH', wake_key, '1')
    redis.call('PEXPIRE', wake_key, 60000)
  end
end

-- A slot holder's record as a flat {field, value, ...} list, like HGETALL of an exclusive
-- holder's hash.
local function slot_record(slots_key, token)
  local text = redis.call('HGET', slots_key, token)
  if not text then
    return {}
  end
  return cjson.decode(text)
end
