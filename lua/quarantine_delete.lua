--[[ quarantine_delete
  Delete records set aside, for good: entries of one quarantine stream (an action's, a
  plain queue's, a consumer group's or a namespace's worker registry's), with the bytes
  and payload they keep. Ids not there are skipped.
  KEYS[1] quarantine  STREAM  records set aside (lib/record.lua)
  ARGV[1] ids   msgpack array of quarantine entry ids (at most 1000)
  Returns {status, n}   status: OK | BAD_ARG; n: entries deleted
]]
--@include lib/status.lua
--@include lib/checked.lua
local quarantine_key = KEYS[1]
local MAX_IDS = 1000
local ids = arg_stream_ids(ARGV[1], MAX_IDS)

if not ids then return {ST_BAD_ARG, 1} end
if #ids == 0 then return {ST_OK, 0} end
return {ST_OK, redis.call('XDEL', quarantine_key, unpack(ids))}
