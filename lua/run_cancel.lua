--[[ run_cancel
  Cancel a run that has not finished: a waiting or delayed run ends CANCELLED at once; a
  running run's lease is revoked (its holder's touch, complete and fail are refused as
  stale from now on) and it ends CANCELLED. It is kept in the failed set like FAILED runs
  (re-queueable, purgeable, counted as failed but not in the per-minute failures), its
  attempt count unchanged; waiters on `ended` are told. A running run's holder is told at
  once on its notice channel (`notice`, "<token> <run_id>") when the caller named that
  holder; otherwise the reply names the holder, for the caller to tell, and a holder that
  hears nothing learns at its next touch (refused).
  KEYS[1] meta     HASH  counters
  KEYS[2] runs     HASH  run_id -> msgpack record
  KEYS[3] pending  ZSET  run_id -> queue order
  KEYS[4] delayed  ZSET  run_id -> due ms
  KEYS[5] leases   ZSET  run_id -> lease deadline ms
  KEYS[6] failed   ZSET  run_id -> finished ms
  KEYS[7] owned    ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[8] ended    CHANNEL  sharded channel told the ids of runs that end (client.action.wait)
  KEYS[9] inputs   HASH  run_id -> input bytes
  KEYS[10] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[11] wake    CHANNEL  sharded channel announcing new work
  KEYS[12] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[13] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[14] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  KEYS[15] waiting  ZSET  run_id -> created ms: runs waiting for their parents (lib/graph.lua)
  KEYS[16] nudge   CHANNEL  sharded channel telling forwarders the outbox has a message (lib/graph.lua)
  KEYS[17] graph    HASH  dependency states, groups' records (lib/graph.lua)
  KEYS[18..n] notice  CHANNEL  the notice channel of the owner named in ARGV[2] (none
                     when ARGV[2] is empty); refused (OUT_OF_RANGE) unless exactly that
                     owner's notice channel in this queue's slot (lib/channels.lua)
  ARGV[1] run_id
  ARGV[2] expected  the owner the caller believes holds the run ('' for none)
  Returns {status, run_status, holder, token, told}
          status: OK | NOT_FOUND | CONFLICT (already finished) | OUT_OF_RANGE (a
          notice channel not the named owner's) | BAD_RECORD (its record does not decode:
          it was set aside, not cancelled); run_status: the run's
          status before the call; holder, token: a running run's owner and fencing
          token ('' and 0 otherwise); told: 1 if the holder was told on its channel
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/channels.lua
--@include lib/flow.lua
local k = {meta = KEYS[1], runs = KEYS[2], pending = KEYS[3], delayed = KEYS[4],
  leases = KEYS[5], failed = KEYS[6], owned = KEYS[7], ended = ended_channel(KEYS[8]),
  inputs = KEYS[9], quarantine = KEYS[10],
  wake = KEYS[11], flows = KEYS[12], flow_held = KEYS[13], outbox = KEYS[14], waiting = KEYS[15], nudge = KEYS[16], graph = KEYS[17]}
local notice = #KEYS > 17 and KEYS[#KEYS] or nil  -- the tail: none, or one channel
local run_id = ARGV[1]
local expected = ARGV[2]
if notice and not channel_of(notice, NOTICE_CHANNEL, k.runs, expected) then
  return {ST_OUT_OF_RANGE}
end

local run, why, raw = run_load(k.runs, run_id)
if run == false then
  run_aside(k, run_id, raw, why)
  return {ST_BAD_RECORD}
end
if not run then return {ST_NOT_FOUND} end
local was = run.s
if was ~= RUN_PENDING and was ~= RUN_RUNNING then return {ST_CONFLICT, was} end

local holder, token = '', 0
if was == RUN_RUNNING then holder, token = run.o or '', run.t or 0 end
redis.call('ZREM', k.pending, run_id)
redis.call('ZREM', k.delayed, run_id)
redis.call('ZREM', k.leases, run_id)
redis.call('ZREM', k.waiting, run_id)
if was == RUN_PENDING then flow_unhold_one(k, run_id, run) end
run.err = 'cancelled'
run.tb = nil
-- The cancel is the last accepted report: no earlier report's resend is taken for one.
run.lrk = 'x'
run.lrt = nil
run.lrw = nil
queue_bury(k, run_id, run, now_ms(), RUN_CANCELLED)
local told = 0
if holder ~= '' and holder == expected and notice then
  redis.call('SPUBLISH', notice, string.format('%d %s', token, run_id))
  told = 1
end
return {ST_OK, was, holder, token, told}
