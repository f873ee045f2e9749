--[[ lib/ended
  Telling waiters (client.action.wait) that a run ended: its id is SPUBLISHed on the
  queue's `ended` channel, and only while someone is subscribed there (one
  PUBSUB SHARDNUMSUB per script call, so a queue nobody waits on pays nothing else).
]]
local ENDED_LISTENERS = {}

local function run_ended(channel, run_id)
  local listeners = ENDED_LISTENERS[channel]
  if listeners == nil then
    listeners = tonumber(redis.call('PUBSUB', 'SHARDNUMSUB', channel)[2])
    ENDED_LISTENERS[channel] = listeners
  end
  if listeners > 0 then redis.call('SPUBLISH', channel, run_id) end
end
