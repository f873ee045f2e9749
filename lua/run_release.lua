--[[ run_release
  Give a running run back without spending its attempt: the holder is shutting down and
  did not run the handler to the end. The run waits again at the back of the queue (or
  goes straight to a parked poller of another owner when one may take it: the releasing
  one is stopping; lib/handoff.lua); the next
  hand-out gets a new fencing token, so nothing from this holder applies after. With a
  delay the run waits that long first, and its flow key's runs with it (RateLimited).
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] pending  ZSET  run_id -> queue order
  KEYS[5] leases   ZSET  run_id -> lease deadline ms
  KEYS[6] wake     CHANNEL  sharded channel announcing new work
  KEYS[7] owned    ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[8] inputs   HASH  run_id -> input bytes
  KEYS[9] parked   ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[10] polls   HASH  poll memos; a parked poller's park rides in its memo
  KEYS[11] poll_times  ZSET  poll memo -> time ms
  KEYS[12] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[13] rate    ZSET  token -> start ms: the action's starts within its rate window
  KEYS[14] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[15] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[16] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[17] flow_vt ZSET  flow key -> virtual time of its last run placed fairly (lib/flow.lua)
  KEYS[18] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  KEYS[19] delayed ZSET  run_id -> due ms
  ARGV[1] run_id
  ARGV[2] token      fencing token from the claim (1 .. 2^53), or '' (then the worker id
                     decides)
  ARGV[3] worker_id
  ARGV[4] delay_ms   0 .. 86400000: wait this long before the run is ready again (0: at
                     once); with a flow key, its key's runs are put off as long (a
                     handler's RateLimited: lib/flow.lua, flow_pause)
  Returns {status, run_status}   status: OK | NOT_FOUND | NO_ACTION | STALE | BAD_RECORD
          (its record does not decode: it was set aside)
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/owners.lua
--@include lib/action.lua
--@include lib/handoff.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], pending = KEYS[4],
  leases = KEYS[5], wake = KEYS[6], owned = KEYS[7], inputs = KEYS[8], parked = KEYS[9],
  polls = KEYS[10], poll_times = KEYS[11], owners = KEYS[12], rate = KEYS[13],
  quarantine = KEYS[14], flows = KEYS[15], flow_held = KEYS[16], flow_vt = KEYS[17],
  flow_rate = KEYS[18],
  delayed = KEYS[19]}
local run_id = ARGV[1]
local token = arg_int_or_none(ARGV[2], 1, INT_MAX)  -- false: token-less
local worker_id = ARGV[3]
local delay_ms = arg_int(ARGV[4], 0, 86400000)

if token == nil then return {ST_BAD_ARG, 2} end
if not delay_ms then return {ST_BAD_ARG, 4} end
local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local run, why, raw = run_load(k.runs, run_id)
if run == false then
  run_aside(k, run_id, raw, why)
  return {ST_BAD_RECORD}
end
if not run then return {ST_NOT_FOUND} end
if not run_is_holder(run, token, worker_id) then return {ST_STALE, run.s} end
redis.call('ZREM', k.leases, run_id)
flow_release(k, run.fk)
run.s = RUN_PENDING
run.a = math.max(run.a - 1, 0)
run.st = nil
offer_forget(run)
local releasing = run.o
owned_drop(k.owned, releasing, run_id)
run.o = nil
local now = now_ms()
run.rd = now + delay_ms
record_save(k.runs, run_id, run)
if delay_ms > 0 then
  redis.call('ZADD', k.delayed, run.rd, run_id)
  if run.fk then flow_pause(k, run.fk, run.rd) end
  return {ST_OK, run.s}
end
queue_push(k, run_id, run)
handoff_ready(k, action, now, 1, releasing)
return {ST_OK, run.s}
