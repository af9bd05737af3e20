-- Extends the lease while the token holds it: 1, else 0; {2, record} when a --replace
-- acquirer (record) asked this holder to stand down: the lease is not extended.
local lock_key = KEYS[1]
local holder_key = KEYS[2]
local token = ARGV[1]
local ttl_ms = ARGV[2] -- '': the holder's own ttl
local store_ttl = ARGV[3] == '1'

-- Only the holder renews, and not after it released a lock kept for its --min-hold.
if redis.call('GET', lock_key) ~= token then
  return 0
end
local policy = holder_policy(holder_key)
if policy.ended then
  return 0
end
if policy.replaced_by then
  return {2, policy.replaced_by}
end
-- No ttl given: the one the holder took the lock with (or what is left, lacking a record).
if ttl_ms == '' then
  local recorded = has_type(holder_key, 'hash') and redis.call('HSTRLEN', holder_key, 'ttl_ms') <= 16
                   and record_number(redis.call('HGET', holder_key, 'ttl_ms'))
  ttl_ms = recorded or redis.call('PTTL', lock_key)
end
-- Extend the lock and the holder's record alike: never below --min-hold's hold_until, and the
-- record by the --lock-delay more.
local life = tonumber(ttl_ms)
if policy.hold_until then
  life = math.max(life, policy.hold_until - server_now())
end
redis.call('PEXPIRE', lock_key, life)
redis.call('PEXPIRE', holder_key, life + (policy.delay_ms or 0))
-- A new ttl given by `dlock renew --ttl` becomes the holder's own.
if store_ttl then
  redis.call('HSET', holder_key, 'ttl_ms', ttl_ms)
end
return 1
