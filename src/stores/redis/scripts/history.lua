-- Reads a lock's history, the stream KEYS[1]: its newest ARGV[1] entries, newest first, each
-- one's text (its first field, named e) unless longer than ARGV[2] bytes, so that another
-- tenant's huge entries never travel. Returns {1, texts...}; {0} when there is no history;
-- {-1, type} when the key holds another type (another tenant's), which is not touched.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {0}
end
if kind ~= 'stream' then
  return {-1, kind}
end
local max_bytes = tonumber(ARGV[2])
local answer = {1}
local entries = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])
for i = 1, #entries do
  local fields = entries[i][2]
  if type(fields) == 'table' and fields[1] == 'e' and type(fields[2]) == 'string'
     and #fields[2] <= max_bytes then
    answer[#answer + 1] = fields[2]
  end
end
return answer
