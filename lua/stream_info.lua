--[[ stream_info
  Size and bounds of a stream partition. A missing stream answers as empty.
  KEYS[1] log   STREAM  the records
  KEYS[2] meta  HASH    bytes: payload and header bytes held
  Returns {status, count, bytes, first_id, last_id, entries_added}   status: OK
          (ids are '0-0' for an empty stream)
]]
--@include lib/status.lua
--@include lib/stream.lua
local k = {log = KEYS[1], meta = KEYS[2]}

if redis.call('EXISTS', k.log) == 0 then return {ST_OK, 0, 0, '0-0', '0-0', 0} end
local count = redis.call('XLEN', k.log)
local bytes = tonumber(redis.call('HGET', k.meta, 'bytes')) or 0
local first, last = '0-0', '0-0'
if count > 0 then
  first = redis.call('XRANGE', k.log, '-', '+', 'COUNT', 1)[1][1]
  last = redis.call('XREVRANGE', k.log, '+', '-', 'COUNT', 1)[1][1]
end
return {ST_OK, count, bytes, first, last, stream_added(k.log)}
