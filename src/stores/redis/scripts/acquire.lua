-- Takes the lock (or, for --shared and --limit, a slot of it), its next fencing token and the
-- holder's record, or registers the waiter. What it answers is described in scripts.hpp.
local lock_key = KEYS[1]
local fence_key = KEYS[2]
local holder_key = KEYS[3]
local waiters_key = KEYS[4]
local queue_key = KEYS[5]
local queue_expiry_key = KEYS[6]
local holders_key = KEYS[7]
local slots_key = KEYS[8]
local kind_key = KEYS[9]
local writers_key = KEYS[10]
local wake_key = KEYS[11]
local watchers_key = KEYS[12]
local freed_key = KEYS[13]
local newest_key = KEYS[14]
local leader_watchers_key = KEYS[15]
local leader_wake_key = KEYS[16]
local token = ARGV[1]
local ttl_ms = ARGV[2]
-- (The client truncates these shorter; the script stores no more than a record may hold.)
local host = string.sub(ARGV[3], 1, max_field_bytes)
local pid = ARGV[4]
local user = string.sub(ARGV[5], 1, max_field_bytes)
local command = string.sub(ARGV[6], 1, max_field_bytes)
local waiter_id = ARGV[7]
local mode = ARGV[8] -- 'wait', 'fair' or 'once'
local max_block_ms = tonumber(ARGV[9])
local kind = ARGV[10] -- 'exclusive', 'shared' or 'limit:N'
local limit = tonumber(string.match(kind, '^limit:(%d+)$') or '1')
local note = string.sub(ARGV[11] or '', 1, max_note_bytes)
-- The cron and CI policies (exclusive locks only): ms, ms, '1' or '0' each.
local min_hold = tonumber(ARGV[12] or '0')
local lock_delay = tonumber(ARGV[13] or '0')
local replace = ARGV[14] == '1'
local supersede = ARGV[15] == '1'
local registered = ARGV[16] == '1' -- an earlier attempt of this waiter registered it
-- What a dlock elect candidate proclaims ('' for every other acquirer).
local value = string.sub(ARGV[17] or '', 1, max_field_bytes)

-- The server's clock in ms, and in microseconds: the queue's order, a lost counter's restart.
local now, time = server_now()
local now_us = time[1] * 1000000 + time[2]
-- Forget the fair waiters that stopped asking, and free the slots whose lease ended.
forget_lapsed_fair_waiters(queue_key, queue_expiry_key, now)
reclaim_slots(holders_key, slots_key, kind_key, now)
-- A fair waiter queues up on its first attempt.
if mode == 'fair' and not redis.call('ZSCORE', queue_key, waiter_id) then
  redis.call('ZADD', queue_key, now_us, waiter_id)
end

-- One key, one kind: 'shared' or 'limit:N' while slot holders exist. Shared holders and the
-- exclusive lock make a read/write lock; a semaphore shares the key with nothing else.
local in_use = kind_in_use(kind_key)
local exclusive_held = redis.call('EXISTS', lock_key) == 1
-- The last exclusive holder vanished with a --lock-delay: nobody takes the key before it ends.
local delay = delay_left(lock_key, holder_key)
if kind == 'exclusive' or kind == 'shared' then
  if in_use and in_use ~= 'shared' then
    return {2, in_use}
  end
elseif exclusive_held then
  return {2, 'exclusive'}
elseif in_use and in_use ~= kind then
  return {2, in_use}
end

-- Whether this kind may enter now. An exclusive waiter (in the writers set) keeps new shared
-- holders out, so that a stream of readers cannot starve a writer.
local free
if kind == 'exclusive' then
  free = not exclusive_held and not in_use and delay == 0
elseif kind == 'shared' then
  free = not exclusive_held and delay == 0 and redis.call('ZCOUNT', writers_key, now, '+inf') == 0
else
  free = delay == 0 and redis.call('ZCARD', holders_key) < limit
end
-- Who asks, as others are shown it (its note and value only when it has them).
local who = {'host', host, 'pid', pid, 'user', user, 'command', command}
if note ~= '' then
  who[#who + 1] = 'note'
  who[#who + 1] = note
end
if value ~= '' then
  who[#who + 1] = 'value'
  who[#who + 1] = value
end
-- Take it if free and no fair waiter is ahead of this one.
local head = redis.call('ZRANGE', queue_key, 0, 0)[1]
if free and (head == nil or head == waiter_id) then
  -- The fencing counter counts on by one while it exists. A missing one (never used, expired,
  -- or lost to a restart without persistence, an eviction or a failover) restarts at the
  -- server's clock in microseconds: a counter started at the clock grows by one per
  -- acquisition, far slower than the clock, so this is above every token it can have issued.
  -- That lets it expire like every other key. Exact in Lua's doubles (below 2^53 until 2255).
  -- (A value dlock did not write there counts as missing.)
  local last = read_counter(fence_key)
  local fence = last and last + 1 or now_us
  local fence_text = string.format('%d', fence)
  redis.call('SET', fence_key, fence_text, 'PX', math.max(7 * 86400000, 2 * tonumber(ttl_ms)))
  -- Record the holder for status and list; it expires with the lock (or the slot).
  local record = {unpack(who)}
  for _, field in ipairs({'acquired_ms', string.format('%d', now), 'fence', fence_text,
                          'ttl_ms', ttl_ms}) do
    record[#record + 1] = field
  end
  if kind == 'exclusive' then
    -- --min-hold: the lock lives at least until hold_until; --lock-delay: the holder record
    -- outlives it by the delay unless released cleanly (see holder_policy).
    local life = math.max(tonumber(ttl_ms), min_hold)
    if min_hold > 0 then
      record[#record + 1] = 'hold_until'
      record[#record + 1] = string.format('%d', now + min_hold)
    end
    if lock_delay > 0 then
      record[#record + 1] = 'delay_ms'
      record[#record + 1] = string.format('%d', lock_delay)
    end
    redis.call('SET', lock_key, token, 'PX', life)
    redis.call('DEL', holder_key)
    redis.call('HSET', holder_key, unpack(record))
    redis.call('PEXPIRE', holder_key, life + lock_delay)
    -- The newest --supersede waiter got it: nobody is left to supersede.
    if supersede and has_type(newest_key, 'hash') and redis.call('HGET', newest_key, 'id') == waiter_id then
      redis.call('DEL', newest_key)
    end
  else
    redis.call('ZADD', holders_key, now + tonumber(ttl_ms), token)
    redis.call('HSET', slots_key, token, cjson.encode(record))
    if not in_use then
      redis.call('SET', kind_key, kind)
    end
    keep_for(holders_key, ttl_ms)
    keep_for(slots_key, ttl_ms)
    keep_for(kind_key, ttl_ms)
  end
  -- Taken from free: a watcher (dlock wait) that found the key held counts it as freed, even
  -- when this acquirer got in before the watcher looked again.
  if not in_use and redis.call('ZCOUNT', watchers_key, now, '+inf') > 0 then
    redis.call('SET', freed_key, string.format('%d', now_us), 'PX', 60000)
  end
  -- Taken from free, by a candidate or by anyone else (dlock run on an election's key leads
  -- too): the leader watchers (leader.lua) wake.
  if not in_use and redis.call('EXISTS', leader_watchers_key) == 1 then
    wake_all(leader_watchers_key, leader_wake_key, now)
  end
  -- The waiter is served: take it out of the queue or the waiters sets.
  if mode == 'fair' then
    redis.call('ZREM', queue_key, waiter_id)
    redis.call('ZREM', queue_expiry_key, waiter_id)
  elseif mode == 'wait' then
    redis.call('ZREM', waiters_key, waiter_id)
  end
  redis.call('ZREM', writers_key, waiter_id)
  -- A slot taken may leave room for the next waiter (readers after a writer, several freed
  -- slots): pass the wake-up on, so that one release lets in all who fit.
  if kind ~= 'exclusive' and (kind == 'shared' or redis.call('ZCARD', holders_key) < limit) then
    wake_waiter(waiters_key, wake_key, now)
  end
  return {1, fence}
end

-- Not taken. Who is in the way, and for how long at most: the exclusive holder; else the slot
-- holder whose lease ends first (a semaphore's next free slot) or last (all readers gone).
local pttl = -2 -- free, but earlier --fair waiters go first
local holder = {}
local holders = redis.call('ZCARD', holders_key)
local state = 0 -- 1: the holder's command ended, kept for its --min-hold; 2: a --lock-delay
if exclusive_held then
  pttl = redis.call('PTTL', lock_key)
  holder = holder_record(holder_key)
  state = holder_policy(holder_key).ended and 1 or 0
elseif delay > 0 then
  pttl = delay
  holder = holder_record(holder_key)
  state = 2
elseif holders > 0 then
  local edge = kind == 'exclusive' and redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')
                                    or redis.call('ZRANGE', holders_key, 0, 0, 'WITHSCORES')
  pttl = math.max(1, tonumber(edge[2]) - now)
  holder = slot_record(slots_key, edge[1])
elseif kind == 'shared' and head == nil then
  -- Free, but an exclusive waiter goes first: make sure one is awake to take it.
  pttl = -3
  wake_waiter(waiters_key, wake_key, now)
end
-- Block until the holder's lease ends (mode 'wait'), else for at most a second.
local block_ms = math.min(1000, max_block_ms)
if mode == 'wait' and pttl > 0 then
  block_ms = math.min(pttl, max_block_ms)
end
-- Adds the waiter to a set scored by when its registration lapses; the set lives as long.
local function register(key, expires)
  redis.call('ZADD', key, expires, waiter_id)
  keep_for(key, expires - now)
end
-- Register the waiter until 2s after its block ends, so that a release wakes it. A waiting
-- exclusive holder also keeps new shared holders out.
if mode == 'fair' then
  register(queue_expiry_key, now + block_ms + 2000)
  keep_for(queue_key, block_ms + 2000)
elseif mode == 'wait' then
  register(waiters_key, now + block_ms + 2000)
end
-- --supersede: a waiter's first registration makes it the newest and wakes the others to see
-- it; a later attempt of an older one finds a newer one there, withdraws, and says who.
if supersede and mode ~= 'once' then
  if not registered then
    redis.call('DEL', newest_key)
    redis.call('HSET', newest_key, 'id', waiter_id, unpack(who))
    redis.call('PEXPIRE', newest_key, block_ms + 2000)
    wake_all(waiters_key, wake_key, now)
  elseif has_type(newest_key, 'hash') and redis.call('HSTRLEN', newest_key, 'id') <= 64 then
    local newest = redis.call('HGET', newest_key, 'id')
    if newest == waiter_id then
      keep_for(newest_key, block_ms + 2000)
    elseif newest then
      for _, key in ipairs({waiters_key, queue_key, queue_expiry_key, writers_key}) do
        redis.call('ZREM', key, waiter_id)
      end
      return {0, pttl, holder, 0, holders, state, 0, 1, holder_record(newest_key)}
    end
  end
end
-- --replace: ask a running dlock holder to stand down (its next renewal sees it).
local replace_asked = 0
if replace and exclusive_held and state == 0 and pttl > 0 and #holder > 0
   and holder[1] ~= 'not_dlock' then
  redis.call('HSET', holder_key, 'replaced_by', cjson.encode(who))
  keep_for(holder_key, pttl) -- (a record another tenant left without expiry gets one)
  replace_asked = 1
end
if mode ~= 'once' and kind == 'exclusive' then
  register(writers_key, now + block_ms + 2000)
end
return {0, pttl, holder, block_ms, holders, state, replace_asked, 0, {}}
