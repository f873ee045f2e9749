--[[ quarantine_delete
  Delete records set aside, for good: entries of one quarantine stream (an action's, a
  plain queue's, a consumer group's or a namespace's worker registry's), with the bytes
  and payload they keep. Ids not there are skipped.
  KEYS[1] quarantine  STREAM  records set aside (lib/record.lua)
  ARGV[1] ids   msgpack array of quarantine entry ids (at most 1000)
  Returns {status, n}   status: OK | OUT_OF_RANGE (ids not so); n: entries deleted
]]
--@include lib/status.lua
local quarantine_key = KEYS[1]
local ids = ARGV[1]
local MAX_IDS = 1000

local ok
ok, ids = pcall(cmsgpack.unpack, ids)
if not ok or type(ids) ~= 'table' or #ids > MAX_IDS then return {ST_OUT_OF_RANGE, 0} end
for _, id in ipairs(ids) do
  if type(id) ~= 'string' or not string.match(id, '^%d+%-%d+$') then
    return {ST_OUT_OF_RANGE, 0}
  end
end
if #ids == 0 then return {ST_OK, 0} end
return {ST_OK, redis.call('XDEL', quarantine_key, unpack(ids))}
