-- dlock barrier: a party arrives (or, once arrived, checks whether its generation tripped, and
-- arrives again if its arrival lapsed meanwhile). What it answers is in scripts.hpp.
local state_key = KEYS[1]    -- hash: the current generation and its parties
local arrivals_key = KEYS[2] -- zset: the parties arrived, by when their arrival lapses (ms)
local party_id = ARGV[1]
local parties = tonumber(ARGV[2])
local joined = tonumber(ARGV[3]) -- the generation this party joined; 0: not arrived yet
local max_block_ms = tonumber(ARGV[4])
local keep_ms = ARGV[5]

local now, time = server_now()
local generation = tonumber(redis.call('HGET', state_key, 'generation') or '0')
-- Tripped since this party joined: the barrier went on to the next generation.
if joined > 0 and generation > joined then
  return {1, joined, parties, 0}
end
-- A new barrier (or one whose state expired) starts at the server's clock in microseconds,
-- above every generation it can have had, as the fencing counter does.
if generation == 0 then
  generation = time[1] * 1000000 + time[2]
end
-- Arrivals that lapsed (the party died, or stopped refreshing) no longer count. (Deleted only
-- when there are some: see reclaim_slots.)
if redis.call('ZCOUNT', arrivals_key, '-inf', '(' .. now) > 0 then
  redis.call('ZREMRANGEBYSCORE', arrivals_key, '-inf', '(' .. now)
end
local arrived = redis.call('ZCARD', arrivals_key)
local in_progress = tonumber(redis.call('HGET', state_key, 'parties') or '0')
if arrived > 0 and in_progress ~= parties then
  return {2, generation, in_progress}
end
if not redis.call('ZSCORE', arrivals_key, party_id) then
  arrived = arrived + 1
end
if arrived >= parties then
  -- The last party: the next arrivals form the next generation. The client wakes the others
  -- on this generation's own list (a key this script cannot declare).
  redis.call('HSET', state_key, 'generation', string.format('%d', generation + 1))
  redis.call('PEXPIRE', state_key, keep_ms)
  redis.call('DEL', arrivals_key)
  return {1, generation, parties, parties - 1}
end
-- Registered until 2s after its block ends; the state outlives every registration.
redis.call('HSET', state_key, 'generation', string.format('%d', generation), 'parties', parties)
redis.call('PEXPIRE', state_key, keep_ms)
redis.call('ZADD', arrivals_key, now + max_block_ms + 2000, party_id)
keep_for(arrivals_key, max_block_ms + 2000)
return {0, generation, parties, arrived, max_block_ms}
