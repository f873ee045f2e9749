--[[ batch_done
  A forwarder carried these messages of a batch (batch_take): they leave its outbox.
  KEYS[1] outbox   ZSET  the batch's messages -> ms due (lib/batch.lua)
  ARGV[1] members  msgpack array of the messages carried (at most 1000)
  Returns {status}   OK
]]
--@include lib/status.lua
--@include lib/checked.lua
local k = {outbox = KEYS[1]}
local members = arg_array(ARGV[1], 1000)
if not members then return {ST_BAD_ARG, 1} end
for _, member in ipairs(members) do
  if type(member) ~= 'string' then return {ST_BAD_ARG, 1} end
end
if #members > 0 then redis.call('ZREM', k.outbox, unpack(members)) end
return {ST_OK}
