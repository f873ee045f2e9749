--[[ run_release
  Give a running run back without spending its attempt: the holder is shutting down and
  did not run the handler to the end. The run waits again at the back of the queue; the
  next hand-out gets a new fencing token, so nothing from this holder applies after.
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] pending  ZSET  run_id -> queue order
  KEYS[5] leases   ZSET  run_id -> lease deadline ms
  KEYS[6] wake     CHANNEL  sharded channel announcing new work
  KEYS[7] owned    ZSET  "<owner>\0<run_id>": the runs each owner holds
  ARGV[1] run_id
  ARGV[2] token      fencing token from the claim, or '' (then the worker id decides)
  ARGV[3] worker_id
  Returns {status, run_status}   status: OK | NOT_FOUND | NO_ACTION | STALE
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/owners.lua
--@include lib/action.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], pending = KEYS[4],
  leases = KEYS[5], wake = KEYS[6], owned = KEYS[7]}
local run_id = ARGV[1]
local token = ARGV[2]
local worker_id = ARGV[3]

if not action_load(k.definition) then return {ST_NO_ACTION} end
local run = run_load(k.runs, run_id)
if not run then return {ST_NOT_FOUND} end
if not run_is_holder(run, token, worker_id) then return {ST_STALE, run.s} end
redis.call('ZREM', k.leases, run_id)
run.s = RUN_PENDING
run.a = math.max(run.a - 1, 0)
run.st = nil
owned_drop(k.owned, run.o, run_id)
run.o = nil
run.rd = now_ms()
run_save(k.runs, run_id, run)
queue_push(k.meta, k.pending, run_id, run)
redis.call('SPUBLISH', k.wake, '1')
return {ST_OK, run.s}
