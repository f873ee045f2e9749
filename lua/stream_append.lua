--[[ stream_append
  Append one record to a stream partition and wake its waiting readers.
  KEYS[1] log   STREAM   the records
  KEYS[2] meta  HASH     bytes: payload and header bytes held
  KEYS[3] wake  CHANNEL  sharded channel announcing records to read
  ARGV[1] payload   record bytes
  ARGV[2] headers   msgpack map of the record's headers, or ''
  Returns {status, id}   status: OK
]]
--@include lib/status.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], meta = KEYS[2], wake = KEYS[3]}
local payload = ARGV[1]
local headers = ARGV[2]

if headers ~= '' and not arg_map(headers) then return {ST_BAD_ARG, 2} end

local id = stream_add(k.log, k.meta, payload, headers)
redis.call('SPUBLISH', k.wake, '1')
return {ST_OK, id}
