-- Appends one event (ARGV[1]) to a lock's history, the stream KEYS[1], keeping its newest
-- ARGV[2] entries exactly (MAXLEN without ~: dlock promises that many, and trimming one entry
-- per append is cheap), and has it expire ARGV[3] ms after this event. A key of another type
-- (another tenant's) or a stream that refuses the entry (its last ID set ahead) is left as it
-- is: the error is returned, and dlock's run goes on without it. Returns 1.
local added = redis.pcall('XADD', KEYS[1], 'MAXLEN', ARGV[2], '*', 'e', ARGV[1])
if type(added) == 'table' and added.err then
  return added
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
