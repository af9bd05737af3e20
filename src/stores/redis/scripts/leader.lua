-- dlock leader --watch: whether the lock's term (its holder's fencing token; 0 when free) is
-- another than the one the watcher saw; if not, registers the watcher among the leader
-- watchers in the same step, so that the change wakes it on the leader wake list: a release
-- (release.lua), or an acquisition from free (acquire.lua). Leader watchers have a list of their
-- own: one that goes through two changes quickly re-registers at once, and on a shared list
-- it could take the wake-up of a slower `dlock wait`. What it answers is in scripts.hpp.
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local holders_key = KEYS[3]
local slots_key = KEYS[4]
local leader_watchers_key = KEYS[5]
local watcher_id = ARGV[1]
local since = tonumber(ARGV[2]) -- the term seen (0: free, or none seen yet)
local max_block_ms = tonumber(ARGV[3])

-- The fence a holder record names (a flat {field, value, ...} list), or nil when it names none
-- dlock could have written.
local function record_fence(record)
  for i = 1, #record - 1, 2 do
    if record[i] == 'fence' then
      local text = record_number(record[i + 1])
      return text and tonumber(text)
    end
  end
  return nil
end

local now = server_now()
-- The holder and its term: the exclusive holder; else (a --shared or --limit lock, which no
-- candidate takes) the earliest of the slot holders (the lowest fence, as status shows first)
-- among the first 100 by lease end, whose next end bounds the block. A holder whose record
-- names no fence (another tenant's key) has term 1: dlock's fences start at the server's clock
-- in µs, far above it.
local term = 0
local pttl = -2
local holder = {}
local slots = 0
if redis.call('EXISTS', lock_key) == 1 then
  pttl = redis.call('PTTL', lock_key)
  holder = holder_record(holder_key, holder_fields_with_value)
  term = record_fence(holder) or 1
else
  slots = redis.call('ZCOUNT', holders_key, '(' .. now, '+inf')
  if slots > 0 then
    local live = redis.call('ZRANGEBYSCORE', holders_key, '(' .. now, '+inf', 'WITHSCORES',
                            'LIMIT', 0, 100)
    pttl = math.max(1, tonumber(live[2]) - now)
    for i = 1, #live - 1, 2 do
      local record = slot_record(slots_key, live[i])
      local fence = record_fence(record) or 1
      if term == 0 or fence < term then
        term, holder = fence, record
      end
    end
  end
end
if term ~= since then
  -- Its registration is done with: the next pass registers under an id of its own.
  redis.call('ZREM', leader_watchers_key, watcher_id)
  return {1, term, pttl, holder, 0, slots}
end
-- Block until the holder's lease ends at most (an end nobody announces wakes nobody).
local block_ms = max_block_ms
if pttl > 0 then
  block_ms = math.min(pttl, max_block_ms)
end
-- Registered until 2s after its block ends, like a lock waiter.
redis.call('ZADD', leader_watchers_key, now + block_ms + 2000, watcher_id)
keep_for(leader_watchers_key, block_ms + 2000)
return {0, term, pttl, holder, block_ms, slots}
