--[[ batch_open
  Open a batch (lib/batch.lua): its callbacks and its parent batch, if any (then a
  message tells the parent it has one more member). Opening one that exists is refused.
  KEYS[1] state    HASH  the batch's counts and settings (lib/batch.lua)
  KEYS[2] outbox   ZSET  the batch's messages -> ms due (lib/batch.lua)
  ARGV[1] callbacks msgpack map: kind (complete, success, death) -> {action, input}
  ARGV[2] parent   the id of the batch this one is a member of, or ''
  ARGV[3] retention_ms  how long the batch is kept once every member ended (1 .. 2^53)
  Returns {status}   OK | CONFLICT (a batch of that id exists)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/checked.lua
local k = {state = KEYS[1], outbox = KEYS[2]}
local callbacks = ARGV[1]
local parent = ARGV[2]
local retention_ms = arg_int(ARGV[3], 1, INT_MAX)
local table_of = arg_map(callbacks)
if not table_of then return {ST_BAD_ARG, 1} end
for kind, cb in pairs(table_of) do
  if (kind ~= 'complete' and kind ~= 'success' and kind ~= 'death') or type(cb) ~= 'table'
      or type(cb[1]) ~= 'string' or type(cb[2]) ~= 'string' then
    return {ST_BAD_ARG, 1}
  end
end
if #parent > 255 or string.find(parent, '\0', 1, true) then return {ST_BAD_ARG, 2} end
if not retention_ms then return {ST_BAD_ARG, 3} end
if redis.call('EXISTS', k.state) == 1 then return {ST_CONFLICT} end
local now = now_ms()
redis.call('HSET', k.state, 'n', 0, 'c', 0, 'f', 0, 'sealed', 0, 'parent', parent,
  'callbacks', callbacks, 'retention', retention_ms, 'created', now)
if parent ~= '' then redis.call('ZADD', k.outbox, now, 'a\0' .. parent) end
return {ST_OK}
