-- Extends the lease while the token holds it: 1, else 0.
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local token = ARGV[1]
local ttl_ms = ARGV[2] -- '': the holder's own ttl
local store_ttl = ARGV[3] == '1'

-- Only the holder renews.
if redis.call('GET', lock_key) ~= token then
  return 0
end
-- No ttl given: the one the holder took the lock with (or what is left, lacking a record).
if ttl_ms == '' then
  local recorded = has_type(holder_key, 'hash') and redis.call('HSTRLEN', holder_key, 'ttl_ms') <= 16
                   and record_number(redis.call('HGET', holder_key, 'ttl_ms'))
  ttl_ms = recorded or redis.call('PTTL', lock_key)
end
-- Extend the lock and the holder's record alike.
redis.call('PEXPIRE', lock_key, ttl_ms)
redis.call('PEXPIRE', holder_key, ttl_ms)
-- A new ttl given by `dlock renew --ttl` becomes the holder's own.
if store_ttl then
  redis.call('HSET', holder_key, 'ttl_ms', ttl_ms)
end
return 1
