--[[ group_leave
  Remove `consumer` from a group. A consumer that still holds pending entries stays
  until they are acked, nacked, claimed or redelivered, so none is lost. A missing stream,
  group or consumer is not an error.
  KEYS[1] log     STREAM  the records (the group lives here)
  KEYS[2] config  HASH    the group's settings
  ARGV[1] group
  ARGV[2] consumer
  Returns {status, left}   status: OK; left: 1 if removed, 0 if kept or unknown
]]
--@include lib/status.lua
--@include lib/stream.lua
local k = {log = KEYS[1], config = KEYS[2]}
local group = ARGV[1]
local consumer = ARGV[2]

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if not group_exists(k.log, k.config) then return {ST_OK, 0} end
local held = redis.call('XPENDING', k.log, group, '-', '+', 1, consumer)
if #held > 0 then return {ST_OK, 0} end
redis.call('XGROUP', 'DELCONSUMER', k.log, group, consumer)
return {ST_OK, 1}
