--[[ run_complete
  Complete a running run, for its current holder only. An identical resend of a complete
  that already succeeded is answered OK and changes nothing.
  KEYS[1] def      HASH  the action's settings
  KEYS[2] meta     HASH  counters
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] leases   ZSET  run_id -> lease deadline ms
  KEYS[6] done     ZSET  run_id -> finished ms (completed runs kept for retention)
  KEYS[7] idem     HASH  idempotency key -> run_id
  ARGV[1] run_id
  ARGV[2] token      fencing token from the claim, or '' (then the worker id decides)
  ARGV[3] worker_id
  ARGV[4] result     output bytes
  ARGV[5] outcome
  Returns {status, duplicate, run_status}
          status: OK | NOT_FOUND | NO_ACTION | STALE | TOO_LARGE; duplicate: 1 for a resend
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
local k = {def = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  leases = KEYS[5], done = KEYS[6], idem = KEYS[7]}
local run_id = ARGV[1]
local token = ARGV[2]
local worker_id = ARGV[3]
local result = ARGV[4]
local outcome = ARGV[5]
local RETAIN_BATCH = 100

local action = action_load(k.def)
if not action then return {ST_NO_ACTION} end
local run = run_load(k.runs, run_id)
if not run then return {ST_NOT_FOUND} end
if not run_is_holder(run, token, worker_id) then
  if run.s == RUN_COMPLETED and run.lrk == 'c' and run_reported_by(run, token, worker_id)
      and run.out == result and run.oc == outcome then
    return {ST_OK, 1, run.s}
  end
  return {ST_STALE, 0, run.s}
end
if action.max_payload >= 0 and #result > action.max_payload then
  return {ST_TOO_LARGE, action.max_payload, run.s}
end

local now = now_ms()
run.s = RUN_COMPLETED
run.ct = now
run.out = result
run.oc = outcome
run.err = nil
run.o = nil
run.lrk = 'c'
run.lrt = run.t
run.lrw = worker_id
run_save(k.runs, run_id, run)
redis.call('ZREM', k.leases, run_id)
redis.call('HDEL', k.inputs, run_id)
redis.call('ZADD', k.done, now, run_id)
queue_retain(k, k.done, now, action.retention_ms, action.retention_count, RETAIN_BATCH)
return {ST_OK, 0, run.s}
