--[[ run_fail
  Fail a running run, for its current holder only. With retry and attempts left the run
  waits for its next attempt (after the action's backoff; ready now, it goes straight to a
  parked poller when one may take it: lib/handoff.lua); otherwise it ends FAILED, kept
  in the failed set with its error. An identical resend is answered OK and changes nothing.
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] pending  ZSET  run_id -> queue order
  KEYS[6] delayed  ZSET  run_id -> due ms
  KEYS[7] leases   ZSET  run_id -> lease deadline ms
  KEYS[8] failed   ZSET  run_id -> finished ms
  KEYS[9] wake     CHANNEL  sharded channel announcing new work
  KEYS[10] owned   ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[11] ended   CHANNEL  sharded channel told the ids of runs that end (client.action.wait)
  KEYS[12] parked  ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[13] polls   HASH  poll memos; a parked poller's park rides in its memo
  KEYS[14] poll_times  ZSET  poll memo -> time ms
  KEYS[15] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[16] rate    ZSET  token -> start ms: the action's starts within its rate window
  KEYS[17] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[18] history STRING  runs per minute over 72 hours (lib/history.lua)
  KEYS[19] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[20] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[21] flow_vt ZSET  flow key -> virtual time of its last run placed fairly (lib/flow.lua)
  KEYS[22] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  KEYS[23] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  KEYS[24] nudge   CHANNEL  sharded channel telling forwarders the outbox has a message (lib/graph.lua)
  KEYS[25] graph    HASH  dependency states, groups' records (lib/graph.lua)
  ARGV[1] run_id
  ARGV[2] token      fencing token from the claim (1 .. 2^53), or '' (then the worker id
                     decides)
  ARGV[3] worker_id
  ARGV[4] message    error message
  ARGV[5] retry      1 = re-queue while attempts remain, 0 = final
  ARGV[6] traceback  the failure's traceback, kept with the run; '' = none
  Returns {status, duplicate, run_status, attempt, max_retries, retry_in_ms}
          status: OK | NOT_FOUND | NO_ACTION | STALE | BAD_RECORD (its record does not
          decode: it was set aside); run_status: the run's status after; on OK, the
          attempt that failed, the attempts allowed and the ms until the next attempt
          (-1: none, the run ended), so the worker can say what comes next
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/handoff.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  pending = KEYS[5], delayed = KEYS[6], leases = KEYS[7], failed = KEYS[8], wake = KEYS[9],
  owned = KEYS[10], ended = ended_channel(KEYS[11]), parked = KEYS[12], polls = KEYS[13],
  poll_times = KEYS[14], owners = KEYS[15], rate = KEYS[16], quarantine = KEYS[17],
  history = KEYS[18],
  flows = KEYS[19], flow_held = KEYS[20], flow_vt = KEYS[21], flow_rate = KEYS[22], noted = {}, outbox = KEYS[23], nudge = KEYS[24], graph = KEYS[25]}
local run_id = ARGV[1]
local token = arg_int_or_none(ARGV[2], 1, INT_MAX)  -- false: token-less
local worker_id = ARGV[3]
local message = ARGV[4]
local retry = arg_int(ARGV[5], 0, 1)
local traceback = ARGV[6]

if token == nil then return {ST_BAD_ARG, 2} end
if not retry then return {ST_BAD_ARG, 5} end

local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local run, why, raw = run_load(k.runs, run_id)
if run == false then
  run_aside(k, run_id, raw, why)
  return {ST_BAD_RECORD}
end
if not run then return {ST_NOT_FOUND} end
if not run_is_holder(run, token, worker_id) then
  if run.lrk == 'f' and run_reported_by(run, token, worker_id) and run.err == message
      and run.lrr == retry then
    return {ST_OK, 1, run.s, run.a, run.mr, -1}
  end
  redis.call('HINCRBY', k.meta, 'stat:stale_refused', 1)
  return {ST_STALE, 0, run.s}
end

local now = now_ms()
redis.call('ZREM', k.leases, run_id)
run.err = message
if traceback ~= '' then run.tb = traceback else run.tb = nil end
run.lrk = 'f'
run.lrt = run.t
run.lrw = worker_id
run.lrr = retry
history_attempt(k.noted, run, now)
if retry == 1 and run.a < run.mr then
  if queue_retry(k, run_id, run, now, action.backoff_ms, action.backoff_max_ms) == 1 then
    handoff_ready(k, action, now, 1)
  else
    handoff_delayed(k, run_id)
  end
else
  queue_bury(k, run_id, run, now, RUN_FAILED)
end
tally_save(k, now)
local retry_in = -1
if run.s == RUN_PENDING then retry_in = run.rd - now end
return {ST_OK, 0, run.s, run.a, run.mr, retry_in}
