--[[ stream_read
  Read up to `count` records of a stream partition between two ids, both inclusive:
  the oldest ones, or with `tail` the newest ones (still returned oldest first).
  A missing stream reads as empty. Changes nothing.
  KEYS[1] log   STREAM  the records
  ARGV[1] start   first id, or '-' for the beginning
  ARGV[2] stop    last id, or '+' for the end
  ARGV[3] count   at most this many records (1..1000)
  ARGV[4] tail    '1' for the newest records, '0' for the oldest
  Returns {status, n, (id, payload, headers) * n}   status: OK
]]
--@include lib/status.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1]}
local start = ARGV[1]
local stop = ARGV[2]
local count = arg_int(ARGV[3], 1, BATCH_MAX)
local tail = arg_flag(ARGV[4])

if start ~= '-' and not arg_stream_id(start) then return {ST_BAD_ARG, 1} end
if stop ~= '+' and not arg_stream_id(stop) then return {ST_BAD_ARG, 2} end
if not count then return {ST_BAD_ARG, 3} end
if tail == nil then return {ST_BAD_ARG, 4} end

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
