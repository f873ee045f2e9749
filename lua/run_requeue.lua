--[[ run_requeue
  Put a FAILED, TIMED_OUT or CANCELLED run back in the queue for a fresh set of attempts
  (or straight to a parked poller when one may take it: lib/handoff.lua).
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] pending  ZSET  run_id -> queue order
  KEYS[5] failed   ZSET  run_id -> finished ms
  KEYS[6] wake     CHANNEL  sharded channel announcing new work
  KEYS[7] inputs   HASH  run_id -> input bytes
  KEYS[8] leases   ZSET  run_id -> lease deadline ms
  KEYS[9] owned    ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[10] parked  ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[11] polls   HASH  poll memos; a parked poller's park rides in its memo
  KEYS[12] poll_times  ZSET  poll memo -> time ms
  KEYS[13] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[14] rate    ZSET  token -> start ms: the action's starts within its rate window
  KEYS[15] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[16] flow_vt ZSET  flow key -> virtual time of its last run placed fairly (lib/flow.lua)
  KEYS[17] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[18] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  ARGV[1] run_id
  Returns {status, run_status}   status: OK | NOT_FOUND | NO_ACTION | CONFLICT (not failed)
          | BAD_RECORD (its record does not decode: it was set aside)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/handoff.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], pending = KEYS[4],
  failed = KEYS[5], wake = KEYS[6], inputs = KEYS[7], leases = KEYS[8], owned = KEYS[9],
  parked = KEYS[10], polls = KEYS[11], poll_times = KEYS[12], owners = KEYS[13], rate = KEYS[14],
  quarantine = KEYS[15], flow_vt = KEYS[16], flows = KEYS[17], flow_rate = KEYS[18]}
local run_id = ARGV[1]

local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local run, why, raw = run_load(k.runs, run_id)
if run == false then
  run_aside(k, run_id, raw, why)
  return {ST_BAD_RECORD}
end
if not run then return {ST_NOT_FOUND} end
if run.s ~= RUN_FAILED and run.s ~= RUN_TIMED_OUT and run.s ~= RUN_CANCELLED then
  return {ST_CONFLICT, run.s}
end
local now = now_ms()
tally_untimed(k.meta, queue_unbury(run, action.max_retries, now))
record_save(k.runs, run_id, run)
redis.call('ZREM', k.failed, run_id)
queue_push(k, run_id, run)
handoff_ready(k, action, now, 1)
return {ST_OK, run.s}
