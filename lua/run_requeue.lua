--[[ run_requeue
  Put a FAILED, TIMED_OUT or CANCELLED run back in the queue for a fresh set of attempts.
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] pending  ZSET  run_id -> queue order
  KEYS[5] failed   ZSET  run_id -> finished ms
  KEYS[6] wake     CHANNEL  sharded channel announcing new work
  ARGV[1] run_id
  Returns {status, run_status}   status: OK | NOT_FOUND | NO_ACTION | CONFLICT (not failed)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], pending = KEYS[4],
  failed = KEYS[5], wake = KEYS[6]}
local run_id = ARGV[1]

local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local run = run_load(k.runs, run_id)
if not run then return {ST_NOT_FOUND} end
if run.s ~= RUN_FAILED and run.s ~= RUN_TIMED_OUT and run.s ~= RUN_CANCELLED then
  return {ST_CONFLICT, run.s}
end
tally_untimed(k.meta, queue_unbury(run, action.max_retries, now_ms()))
run_save(k.runs, run_id, run)
redis.call('ZREM', k.failed, run_id)
queue_push(k.meta, k.pending, run_id, run)
redis.call('SPUBLISH', k.wake, '1')
return {ST_OK, run.s}
