--[[ batch_seal
  Seal a batch: no member is added from now on, and once every member has ended it
  settles (lib/batch.lua, batch_settle: at once, when they all ended already).
  KEYS[1] state    HASH  the batch's counts and settings (lib/batch.lua)
  KEYS[2] outbox   ZSET  the batch's messages -> ms due (lib/batch.lua)
  Returns {status}   OK | NOT_FOUND (no such batch)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/batch.lua
local k = {state = KEYS[1], outbox = KEYS[2]}
if redis.call('EXISTS', k.state) == 0 then return {ST_NOT_FOUND} end
redis.call('HSET', k.state, 'sealed', '1')
batch_settle(k, now_ms())
return {ST_OK}
