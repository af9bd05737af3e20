-- Withdraws a barrier party that gives up (KEYS: state, arrivals; ARGV: its id, the generation
-- it joined), unless that generation tripped meanwhile: then 1 (it passed the barrier), else 0.
local joined = tonumber(ARGV[2])
local generation = tonumber(redis.call('HGET', KEYS[1], 'generation') or '0')
if joined > 0 and generation > joined then
  return 1
end
redis.call('ZREM', KEYS[2], ARGV[1])
return 0
