--[[ batch_take
  Take a batch's messages that are due (lib/batch.lua), for a forwarder to carry, each
  due again `lease_ms` later should it not finish (batch_done).
  KEYS[1] state    HASH  the batch's counts and settings (lib/batch.lua)
  KEYS[2] outbox   ZSET  the batch's messages -> ms due (lib/batch.lua)
  ARGV[1] lease_ms a message taken is due again after this many ms (1 .. 3600000)
  Returns {status, message * n}   status: OK | NOT_FOUND (no such batch: it expired);
          each {member, 'c', kind, action, input}
          (make a callback run), {member, 'p', parent, status, version} (tell the parent
          batch) or {member, 'a', parent} (tell the parent it has this member)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/checked.lua
local k = {state = KEYS[1], outbox = KEYS[2]}
local lease_ms = arg_int(ARGV[1], 1, 3600000)
if not lease_ms then return {ST_BAD_ARG, 1} end
if redis.call('EXISTS', k.state) == 0 then return {ST_NOT_FOUND} end
local now = now_ms()
local members = redis.call('ZRANGE', k.outbox, '-inf', now, 'BYSCORE', 'LIMIT', 0, 100)
local out = {ST_OK}
local callbacks = nil
for _, member in ipairs(members) do
  local parts = {}
  for part in string.gmatch(string.sub(member, 3) .. '\0', '([^%z]*)%z') do
    parts[#parts + 1] = part
  end
  local kind = string.sub(member, 1, 1)
  redis.call('ZADD', k.outbox, now + lease_ms, member)
  if kind == 'c' then
    if callbacks == nil then
      local ok, map = pcall(cmsgpack.unpack, redis.call('HGET', k.state, 'callbacks') or '')
      callbacks = ok and type(map) == 'table' and map or {}
    end
    local cb = callbacks[parts[1]]
    if cb then
      out[#out + 1] = {member, 'c', parts[1], cb[1], cb[2]}
    else
      redis.call('ZREM', k.outbox, member)  -- no such callback: nothing to make
    end
  elseif kind == 'p' then
    out[#out + 1] = {member, 'p', parts[1], tonumber(parts[2]), tonumber(parts[3])}
  else
    out[#out + 1] = {member, 'a', parts[1]}
  end
end
return out
