--[[ stream_create
  Fix a stream's partition count, recorded in partition 0's meta hash where every client
  looks it up. Creating it again with the same count changes nothing. A different count
  is refused, and so is a count above 1 for a stream that already exists without one
  (it was used as a single partition).
  KEYS[1] log   STREAM  partition 0's records
  KEYS[2] meta  HASH    partition 0's meta (bytes; partitions: the partition count)
  ARGV[1] partitions  the partition count (1..1024)
  Returns {status, partitions}   status: OK | CONFLICT; partitions: the recorded count
]]
--@include lib/status.lua
--@include lib/checked.lua
local k = {log = KEYS[1], meta = KEYS[2]}
local partitions = arg_int(ARGV[1], 1, 1024)

if not partitions then return {ST_BAD_ARG, 1} end

local recorded = tonumber(redis.call('HGET', k.meta, 'partitions'))
if recorded then
  if recorded ~= partitions then return {ST_CONFLICT, recorded} end
  return {ST_OK, recorded}
end
if partitions > 1 and redis.call('EXISTS', k.log) == 1 then return {ST_CONFLICT, 1} end
redis.call('HSET', k.meta, 'partitions', partitions)
return {ST_OK, partitions}
