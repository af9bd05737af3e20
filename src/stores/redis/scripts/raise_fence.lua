-- Raises a lock's fencing counter (KEYS[1]) to at least ARGV[1], kept as long as acquire keeps
-- it (ARGV[2] ms): with Redlock, the token a majority handed out reaches every node, so that
-- the next majority, which shares a node with this one, hands out a larger one. Returns 1.
local fence_key = KEYS[1]
local floor = tonumber(ARGV[1])
local current = read_counter(fence_key) or 0
if current < floor then
  redis.call('SET', fence_key, ARGV[1], 'PX', ARGV[2])
end
return 1
