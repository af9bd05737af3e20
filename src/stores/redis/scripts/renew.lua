-- Extends the lease while the token holds it: 1 for the lock, 2 for a --shared or --limit
-- slot, else 0.
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local holders_key = KEYS[3]
local slots_key = KEYS[4]
local kind_key = KEYS[5]
local token = ARGV[1]
local ttl_ms = ARGV[2] -- '': the holder's own ttl
local store_ttl = ARGV[3] == '1'

if redis.call('GET', lock_key) == token then
  -- No ttl given: the one the holder took the lock with (or what is left, lacking a record).
  if ttl_ms == '' then
    ttl_ms = redis.call('HGET', holder_key, 'ttl_ms') or redis.call('PTTL', lock_key)
  end
  -- Extend the lock and the holder's record alike.
  redis.call('PEXPIRE', lock_key, ttl_ms)
  redis.call('PEXPIRE', holder_key, ttl_ms)
  -- A new ttl given by `dlock renew --ttl` becomes the holder's own.
  if store_ttl then
    redis.call('HSET', holder_key, 'ttl_ms', ttl_ms)
  end
  return 1
end
-- A slot holder: only while its lease has not ended.
local now = server_now()
reclaim_slots(holders_key, slots_key, kind_key, now)
local ends = redis.call('ZSCORE', holders_key, token)
if not ends then
  return 0
end
local record = slot_record(slots_key, token)
local own_ttl
for i = 1, #record - 1, 2 do
  if record[i] == 'ttl_ms' then
    own_ttl = record[i + 1]
  end
end
if ttl_ms == '' then
  ttl_ms = own_ttl or string.format('%d', tonumber(ends) - now)
end
redis.call('ZADD', holders_key, 'XX', now + tonumber(ttl_ms), token)
keep_for(holders_key, ttl_ms)
keep_for(slots_key, ttl_ms)
keep_for(kind_key, ttl_ms)
if store_ttl then
  for i = 1, #record - 1, 2 do
    if record[i] == 'ttl_ms' then
      record[i + 1] = ttl_ms
    end
  end
  redis.call('HSET', slots_key, token, cjson.encode(record))
end
return 2
