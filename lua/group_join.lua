--[[ group_join
  Join `consumer` to a consumer group, creating the group (at the beginning of the
  stream, so it sees every record still held) and the stream when missing. Settings given
  are applied; settings not given keep their current values (defaults for a new group).
  KEYS[1] log     STREAM  the records (the group lives here)
  KEYS[2] config  HASH    the group's settings
  ARGV[1] group
  ARGV[2] consumer
  ARGV[3] ack_timeout_ms  0 .. 2^32 - 1, '' keeps the current value; 0 turns redelivery on
                          timeout off
  ARGV[4] max_deliver     1 .. 2^32 - 1, '' keeps the current value
  Returns {status, created}   status: OK; created: 1 if the group was created
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], config = KEYS[2]}
local group = ARGV[1]
local consumer = ARGV[2]
local ack_timeout_ms = arg_int_or_none(ARGV[3], 0, U32_MAX)
local max_deliver = arg_int_or_none(ARGV[4], 1, U32_MAX)

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if ack_timeout_ms == nil then return {ST_BAD_ARG, 3} end
if max_deliver == nil then return {ST_BAD_ARG, 4} end
local created = group_ensure(k.log, k.config, group, now_ms())
redis.call('XGROUP', 'CREATECONSUMER', k.log, group, consumer)
if ack_timeout_ms then redis.call('HSET', k.config, 'ack_timeout_ms', ack_timeout_ms) end
if max_deliver then redis.call('HSET', k.config, 'max_deliver', max_deliver) end

return {ST_OK, created}
