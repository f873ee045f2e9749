--[[ lib/ended
  Telling waiters (client.action.wait) that a run ended: its id is SPUBLISHed on the
  queue's `ended` channel, and only while someone is subscribed there (one
  PUBSUB SHARDNUMSUB per script call, so a queue nobody waits on pays nothing else).
  The count is kept in the channel's table, which the script makes for its call
  (ended_channel): nothing of it outlives the call, so a waiter who subscribes after one
  call is counted by the next, called by FCALL or by SHA alike.
  This runs after the script's writes, so it must not fail: both calls are pcalls, and a
  refusal (an ACL without those rights) only means nobody is told.
]]

-- The `ended` channel `name` for one script call: a local of the script (a KEYS entry's
-- table), never kept at file level, where a Functions library would keep it for good.
local function ended_channel(name)
  return {name = name, listeners = nil}
end

-- The subscribers of `ended` (from ended_channel): counted at the call's first end, and
-- that count serves its others.
local function ended_listeners(ended)
  local listeners = ended.listeners
  if listeners == nil then
    local reply = redis.pcall('PUBSUB', 'SHARDNUMSUB', ended.name)
    listeners = 0
    if type(reply) == 'table' and reply.err == nil then listeners = tonumber(reply[2]) end
    ended.listeners = listeners
  end
  return listeners
end

-- Tell the waiters on `ended` (from ended_channel) that `run_id` ended.
local function run_ended(ended, run_id)
  if ended_listeners(ended) > 0 then redis.pcall('SPUBLISH', ended.name, run_id) end
end

-- Tell them that each of `run_ids` ended: a batch nobody waits on costs one look.
local function runs_ended(ended, run_ids)
  if ended_listeners(ended) == 0 then return end
  for i = 1, #run_ids do redis.pcall('SPUBLISH', ended.name, run_ids[i]) end
end
