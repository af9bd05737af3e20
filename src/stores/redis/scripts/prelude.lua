-- Put before the scripts that use its functions (see src/CMakeLists.txt), so that "now", "a fair
-- waiter is gone", "a slot's lease ended" and "wake waiters" are defined once.

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

-- Pushes n (at least 1) wake-ups onto the list key, which expires if nobody takes them.
local function push_wakeups(key, n)
  while n > 0 do
    local batch = {}
    for i = 1, math.min(n, 100) do
      batch[i] = '1'
    end
    redis.call('RPUSH', key, unpack(batch))
    n = n - #batch
  end
  redis.call('PEXPIRE', key, 60000)
end

-- Wakes one more live waiter on the shared wake list, unless every live waiter has a wake-up
-- pending already: one per freed slot, expiring if nobody takes it.
local function wake_waiter(waiters_key, wake_key, now)
  if redis.call('ZCOUNT', waiters_key, now, '+inf') > redis.call('LLEN', wake_key) then
    push_wakeups(wake_key, 1)
  end
end

-- Wakes every live waiter registered in waiters_key (a zset scored by when each registration
-- lapses) on wake_key: one wake-up each, less those pending already.
local function wake_all(waiters_key, wake_key, now)
  local missing = redis.call('ZCOUNT', waiters_key, now, '+inf') - redis.call('LLEN', wake_key)
  if missing > 0 then
    push_wakeups(wake_key, missing)
  end
end

-- What other tenants of the server may have written in dlock's keys is read bounded: no
-- script copies a value of arbitrary size. lock::max_holder_record_bytes and
-- lock::max_holder_field_bytes, in bytes (script_test checks they agree):
local max_record_bytes = 4096
local max_field_bytes = 256
-- lock::max_note_bytes: the longest --note, in bytes.
local max_note_bytes = 1024
-- The fields of a holder record, the only ones read back; and with a dlock elect candidate's
-- value, which only status and the leader gate read (a waiter's attempt pays nothing for it).
local holder_fields = {'host', 'pid', 'user', 'command', 'note', 'acquired_ms', 'fence', 'ttl_ms'}
local holder_fields_with_value = {'host', 'pid', 'user', 'command', 'note', 'value',
                                  'acquired_ms', 'fence', 'ttl_ms'}
-- What a record that is not a dlock holder's reads as (the client shows "not a dlock holder").
local not_dlock = {'not_dlock', '1'}

-- Whether key holds a value of the given type (a key of another type would fail a command).
local function has_type(key, type_name)
  return redis.call('TYPE', key).ok == type_name
end

-- The counter at key (a fencing counter) as a number, or nil when missing or not one dlock
-- wrote: not a string of at most 16 digits (below 2^53, exact in Lua's doubles).
local function read_counter(key)
  if not has_type(key, 'string') or redis.call('STRLEN', key) > 16 then
    return nil
  end
  local text = redis.call('GET', key)
  if not string.match(text, '^%d+$') then
    return nil
  end
  return tonumber(text)
end

-- The kind a key's slot holders share (its kind key), read checked: false when there is none,
-- 'shared' or 'limit:N' as dlock wrote it, or 'foreign' for anything else (another tenant's
-- value or type), which is never read whole.
local function kind_in_use(kind_key)
  local key_type = redis.call('TYPE', kind_key).ok
  if key_type == 'none' then
    return false
  end
  if key_type == 'string' and redis.call('STRLEN', kind_key) <= 32 then
    local kind = redis.call('GET', kind_key)
    if kind == 'shared' or string.match(kind, '^limit:%d+$') then
      return kind
    end
  end
  return 'foreign'
end

-- text if it is a plain decimal number dlock may have written (a ttl in ms), else nil.
local function record_number(text)
  if type(text) == 'string' and #text <= 16 and string.match(text, '^%d+$') then
    return text
  end
  return nil
end

-- The exclusive holder's record at key as a flat {field, value, ...} list, like HGETALL of
-- its known fields (holder_fields, or the fields given): {} when there is none, not_dlock when
-- it is larger than dlock writes.
local function holder_record(key, fields)
  fields = fields or holder_fields
  if not has_type(key, 'hash') then
    return redis.call('EXISTS', key) == 1 and not_dlock or {}
  end
  local bytes = 0
  for i = 1, #fields do
    bytes = bytes + #fields[i] + redis.call('HSTRLEN', key, fields[i])
  end
  if bytes > max_record_bytes then
    return not_dlock
  end
  local values = redis.call('HMGET', key, unpack(fields))
  local record = {}
  for i = 1, #fields do
    if values[i] then
      record[#record + 1] = fields[i]
      record[#record + 1] = values[i]
    end
  end
  return record
end

-- A record dlock wrote as the JSON list {field, value, ...} (a slot holder's, a --replace
-- request) as a flat list like holder_record: not_dlock when it is not such a list.
local function decode_record(text)
  local ok, decoded = pcall(cjson.decode, text)
  if not ok or type(decoded) ~= 'table' then
    return not_dlock
  end
  local record = {}
  for i = 1, #decoded - 1, 2 do
    if type(decoded[i]) ~= 'string' or type(decoded[i + 1]) ~= 'string' then
      return not_dlock
    end
    record[#record + 1] = decoded[i]
    record[#record + 1] = decoded[i + 1]
  end
  return record
end

-- A slot holder's record as a flat {field, value, ...} list, like holder_record: {} when there
-- is none, not_dlock when it is larger than dlock writes or not the JSON list dlock writes.
local function slot_record(slots_key, token)
  if not has_type(slots_key, 'hash') then
    return {}
  end
  if redis.call('HSTRLEN', slots_key, token) > max_record_bytes then
    return not_dlock
  end
  local text = redis.call('HGET', slots_key, token)
  if not text then
    return {}
  end
  return decode_record(text)
end

-- The cron and CI policies an exclusive holder's record (holder_key) keeps beside its fields,
-- read bounded and checked (what another tenant wrote otherwise counts as not there):
--   hold_until: --min-hold, the server's ms until which the lock stays taken;
--   ended: its holder released it before hold_until (the lock is kept, no longer its own);
--   delay_ms: --lock-delay, armed while it holds the lock: the holder record outlives the
--     lock key by this much unless released cleanly (delay_left);
--   replaced_by: a --replace acquirer's record (a JSON list), asking it to stand down.
local function holder_policy(holder_key)
  local policy = {}
  if not has_type(holder_key, 'hash') then
    return policy
  end
  local function number(field)
    if redis.call('HSTRLEN', holder_key, field) > 16 then
      return nil
    end
    local text = record_number(redis.call('HGET', holder_key, field))
    return text and tonumber(text)
  end
  policy.hold_until = number('hold_until')
  policy.ended = redis.call('HEXISTS', holder_key, 'ended') == 1
  policy.delay_ms = number('delay_ms')
  local replace_bytes = redis.call('HSTRLEN', holder_key, 'replaced_by')
  if replace_bytes > 0 and replace_bytes <= max_record_bytes then
    local record = decode_record(redis.call('HGET', holder_key, 'replaced_by'))
    if #record > 0 and record[1] ~= 'not_dlock' then
      policy.replaced_by = record
    end
  end
  return policy
end

-- What is left of the --lock-delay of the lock's last holder, in ms (0: none): while the lock
-- key is gone, a holder record that armed a delay and was not released cleanly lives on for
-- that delay. One whose time to live exceeds the delay it names (or has none) is not dlock's.
local function delay_left(lock_key, holder_key)
  if redis.call('EXISTS', lock_key) == 1 then
    return 0
  end
  local policy = holder_policy(holder_key)
  if not policy.delay_ms or policy.ended then
    return 0
  end
  local left = redis.call('PTTL', holder_key)
  if left <= 0 or left > policy.delay_ms then
    return 0
  end
  return left
end
