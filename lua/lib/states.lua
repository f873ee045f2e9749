--[[ lib/states
  The set each queue state lives in, by the name operators use (action_runs,
  action_purge): pending, delayed, running, completed, failed.
]]
local function state_set(k, state)
  if state == 'pending' then return k.pending end
  if state == 'delayed' then return k.delayed end
  if state == 'running' then return k.leases end
  if state == 'completed' then return k.done end
  if state == 'failed' then return k.failed end
  return nil
end
