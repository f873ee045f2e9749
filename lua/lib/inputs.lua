--[[ lib/inputs
  What becomes of a run's input when the run completes. By default it is deleted then.
  An action registered with keep_inputs = 1 (ActionRegisterOptions.keep_inputs) keeps
  it for as long as the completed run is kept: retention, purge and the action's delete
  remove it with the run (queue_forget in lib/queue.lua, action_delete), so the inputs
  hash holds exactly the runs waiting, running or failed, and the completed runs of such
  an action. The setting is read here, once per completing call, by the scripts alone.
]]
--@include lib/checked.lua

-- Whether a stored or registered keep_inputs `v` keeps inputs: 1 does; absent, 0 or a
-- value that does not parse reads as the default, 0 (deleted).
local function inputs_kept(v)
  return v ~= nil and v ~= false and arg_int(v, 0, 1) == 1
end

-- Whether `v` may be registered as keep_inputs: absent, 0 or 1.
local function inputs_setting_valid(v)
  return v == nil or arg_int(v, 0, 1) ~= nil
end

-- The runs `ids` (at least one) of the action whose settings are `k.definition` have
-- just completed: delete their inputs, unless the action keeps them.
local function inputs_completed(k, ids)
  if not inputs_kept(redis.call('HGET', k.definition, 'keep_inputs')) then
    redis.call('HDEL', k.inputs, unpack(ids))
  end
end
