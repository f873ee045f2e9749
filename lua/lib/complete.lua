--[[ lib/complete
  Completing one running run, for its current holder only; shared by run_complete and
  run_complete_many so a batch applies exactly the single-run rules to each item.
]]
--@include lib/status.lua
--@include lib/run.lua
--@include lib/owners.lua
--@include lib/ended.lua

-- Complete `run_id` with `result` if the caller (token, or worker id when token is '')
-- holds it. An identical resend of a complete that already took effect answers OK with
-- duplicate = 1 and changes nothing. Returns status, duplicate, run status (or the
-- payload limit for TOO_LARGE).
local function complete_run(k, action, now, run_id, token, worker_id, result, outcome)
  local run = run_load(k.runs, run_id)
  if not run then return ST_NOT_FOUND, 0, -1 end
  if not run_is_holder(run, token, worker_id) then
    if run.s == RUN_COMPLETED and run.lrk == 'c' and run_reported_by(run, token, worker_id)
        and run.out == result and run.oc == outcome then
      return ST_OK, 1, run.s
    end
    redis.call('HINCRBY', k.meta, 'stat:stale_refused', 1)
    return ST_STALE, 0, run.s
  end
  if action.max_payload >= 0 and #result > action.max_payload then
    return ST_TOO_LARGE, 0, action.max_payload
  end
  run.s = RUN_COMPLETED
  run.ct = now
  run.out = result
  run.oc = outcome
  run.err = nil
  run.tb = nil
  owned_drop(k.owned, run.o, run_id)
  run.o = nil
  run.lrk = 'c'
  run.lrt = run.t
  run.lrw = worker_id
  run_save(k.runs, run_id, run)
  redis.call('ZREM', k.leases, run_id)
  redis.call('HDEL', k.inputs, run_id)
  redis.call('ZADD', k.done, now, run_id)
  run_ended(k.ended, run_id)
  return ST_OK, 0, run.s
end
