-- Extends a --shared or --limit holder's lease (its slot) while the token holds one: 1, else 0.
local holders_key = KEYS[1]
local slots_key = KEYS[2]
local kind_key = KEYS[3]
local token = ARGV[1]
local ttl_ms = ARGV[2] -- '': the holder's own ttl
local store_ttl = ARGV[3] == '1'

-- Only while its lease has not ended.
local now = server_now()
reclaim_slots(holders_key, slots_key, kind_key, now)
local ends = redis.call('ZSCORE', holders_key, token)
if not ends then
  return 0
end
-- No ttl given: the one the holder took its slot with (or what is left, lacking a record).
local record = slot_record(slots_key, token)
local ttl_field
for i = 1, #record - 1, 2 do
  if record[i] == 'ttl_ms' and record_number(record[i + 1]) then
    ttl_field = i + 1
  end
end
if ttl_ms == '' then
  ttl_ms = ttl_field and record[ttl_field] or string.format('%d', tonumber(ends) - now)
end
redis.call('ZADD', holders_key, 'XX', now + tonumber(ttl_ms), token)
keep_for(holders_key, ttl_ms)
keep_for(slots_key, ttl_ms)
keep_for(kind_key, ttl_ms)
-- A new ttl given by `dlock renew --ttl` becomes the holder's own.
if store_ttl and ttl_field then
  record[ttl_field] = ttl_ms
  redis.call('HSET', slots_key, token, cjson.encode(record))
end
return 1
