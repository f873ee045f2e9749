--[[ batch_due
  The namespace's open batches whose turn to be looked at has come (the forwarders'
  upkeep: a batch message a forwarder left behind, as it died, is carried then), each
  put off by `every_ms`; and batches found gone (expired) dropped from the index.
  KEYS[1] batches  ZSET  batch id -> ms its messages are next looked at
  ARGV[1] limit    at most this many batches (1 .. 1000)
  ARGV[2] every_ms the next look at each comes this many ms later (1 .. 3600000)
  ARGV[3] gone     msgpack array of batch ids to drop (at most 1000)
  Returns {status, batch_id * n}   OK
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/checked.lua
local k = {batches = KEYS[1]}
local limit = arg_int(ARGV[1], 1, 1000)
local every_ms = arg_int(ARGV[2], 1, 3600000)
local gone = arg_array(ARGV[3], 1000)
if not limit then return {ST_BAD_ARG, 1} end
if not every_ms then return {ST_BAD_ARG, 2} end
if not gone then return {ST_BAD_ARG, 3} end
for _, id in ipairs(gone) do
  if type(id) ~= 'string' then return {ST_BAD_ARG, 3} end
end
if #gone > 0 then redis.call('ZREM', k.batches, unpack(gone)) end
local now = now_ms()
local ids = redis.call('ZRANGE', k.batches, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
local out = {ST_OK}
for _, id in ipairs(ids) do
  redis.call('ZADD', k.batches, now + every_ms, id)
  out[#out + 1] = id
end
return out
