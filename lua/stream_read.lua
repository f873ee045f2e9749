--[[ stream_read
  Read up to `count` records of a stream partition between two ids, both inclusive:
  the oldest ones, or with `tail` the newest ones (still returned oldest first).
  A missing stream reads as empty. Changes nothing.
  KEYS[1] log   STREAM  the records
  ARGV[1] start   first id, '-' for the beginning
  ARGV[2] stop    last id, '+' for the end
  ARGV[3] count   at most this many records (1..1000)
  ARGV[4] tail    '1' for the newest records, '0' for the oldest
  Returns {status, n, (id, payload, headers) * n}   status: OK
]]
--@include lib/status.lua
--@include lib/stream.lua
local k = {log = KEYS[1]}
local start = ARGV[1]
local stop = ARGV[2]
local count = tonumber(ARGV[3])
local tail = ARGV[4] == '1'

local entries
if tail then
  entries = redis.call('XREVRANGE', k.log, stop, start, 'COUNT', count)
else
  entries = redis.call('XRANGE', k.log, start, stop, 'COUNT', count)
end
local out = {ST_OK, #entries}
local first, last, step = 1, #entries, 1
if tail then first, last, step = #entries, 1, -1 end
for i = first, last, step do
  local payload, headers = stream_fields(entries[i][2])
  out[#out + 1] = entries[i][1]
  out[#out + 1] = payload
  out[#out + 1] = headers
end
return out
