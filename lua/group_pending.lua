--[[ group_pending
  List up to `count` pending (delivered, not yet acked) entries of a group in id order,
  from `start`: the whole group's, or one consumer's. A missing stream or group lists
  nothing. Changes nothing.
  KEYS[1] log     STREAM  the records (the group lives here)
  KEYS[2] config  HASH    the group's settings
  ARGV[1] group
  ARGV[2] consumer  '' for the whole group
  ARGV[3] start     first id (inclusive), '-' for the beginning
  ARGV[4] count     at most this many entries (1..1000)
  Returns {status, n, (id, consumer, idle_ms, delivery_count) * n}   status: OK
]]
--@include lib/status.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], config = KEYS[2]}
local group = ARGV[1]
local consumer = ARGV[2]
local start = ARGV[3]
local count = arg_int(ARGV[4], 1, BATCH_MAX)

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if start ~= '-' and not arg_stream_id(start) then return {ST_BAD_ARG, 3} end
if not count then return {ST_BAD_ARG, 4} end

if not group_exists(k.log, k.config) then return {ST_OK, 0} end
local entries
if consumer == '' then
  entries = redis.call('XPENDING', k.log, group, start, '+', count)
else
  entries = redis.call('XPENDING', k.log, group, start, '+', count, consumer)
end
local out = {ST_OK, #entries}
for _, e in ipairs(entries) do
  out[#out + 1] = e[1]
  out[#out + 1] = e[2]
  out[#out + 1] = e[3]
  out[#out + 1] = e[4]
end
return out
