--[[ lib/ended
  Telling waiters (client.action.wait) that a run ended: its id is SPUBLISHed on the
  queue's `ended` channel, and only while someone is subscribed there (one
  PUBSUB SHARDNUMSUB per script call, so a queue nobody waits on pays nothing else).
  This runs after the script's writes, so it must not fail: both calls are pcalls, and a
  refusal (an ACL without those rights) only means nobody is told.
]]
local ENDED_LISTENERS = {}

local function run_ended(channel, run_id)
  local listeners = ENDED_LISTENERS[channel]
  if listeners == nil then
    local reply = redis.pcall('PUBSUB', 'SHARDNUMSUB', channel)
    listeners = 0
    if type(reply) == 'table' and reply.err == nil then listeners = tonumber(reply[2]) end
    ENDED_LISTENERS[channel] = listeners
  end
  if listeners > 0 then redis.pcall('SPUBLISH', channel, run_id) end
end
