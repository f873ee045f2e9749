--[[ action_quarantine_replay
  Put a record set aside from an action's queue back, taken out of the quarantine. A run
  (lib/run.lua): the record given (the one set aside, or a fixed one) and its input under
  its run id (a completed run set aside without one gets none); a run that was waiting or running waits again at the back of the queue (a
  lease it held ended with it; the attempts it spent count), a finished one goes back to
  the completed or failed runs. A schedule (lib/schedule.lua): its record, due next at
  `due_ms` (computed by the caller, which could evaluate it).
  KEYS[1] quarantine    STREAM  the action's records set aside (lib/record.lua)
  KEYS[2] meta          HASH  counters (qseq: queue order; n:timed_out)
  KEYS[3] runs          HASH  run_id -> msgpack record
  KEYS[4] inputs        HASH  run_id -> input bytes
  KEYS[5] pending       ZSET  run_id -> queue order
  KEYS[6] done          ZSET  run_id -> finished ms
  KEYS[7] failed        ZSET  run_id -> finished ms
  KEYS[8] wake          CHANNEL  sharded channel announcing new work
  KEYS[9] schedules     HASH  schedule name -> msgpack record
  KEYS[10] schedule_due ZSET  schedule name -> next occurrence ms
  ARGV[1] entry_id  the quarantine entry's id
  ARGV[2] record    the record to put back
  ARGV[3] due_ms    a schedule's next occurrence (ms since the epoch); 0 for a run
  Returns {status}   status: OK | NOT_FOUND (no such quarantine entry) | OUT_OF_RANGE (a
          kind that is not put back: a slot, which is free again; or a bad due_ms) |
          BAD_RECORD (the record does not decode) | CONFLICT (a run or schedule of that
          name exists again) | BAD_ARG
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/record.lua
local k = {quarantine = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  pending = KEYS[5], done = KEYS[6], failed = KEYS[7], wake = KEYS[8], schedules = KEYS[9],
  schedule_due = KEYS[10]}
local entry_id = ARGV[1]
local record = ARGV[2]
local due_ms = arg_int(ARGV[3], 0, INT_MAX)

if not arg_stream_id(entry_id) then return {ST_BAD_ARG, 1} end
if not due_ms then return {ST_BAD_ARG, 3} end
local aside = record_set_aside(k.quarantine, entry_id)
if not aside then return {ST_NOT_FOUND} end
local kind, field = aside[1], aside[2]
if kind == 'run' then
  local run = run_decode(record)
  if not run then return {ST_BAD_RECORD} end
  if redis.call('HEXISTS', k.runs, field) == 1 then return {ST_CONFLICT} end
  local now = now_ms()
  -- A completed run has an input only when its action kept it (lib/inputs.lua); one set
  -- aside with none ('') gets none back.
  if run.s ~= RUN_COMPLETED or aside[5] ~= '' then
    redis.call('HSET', k.inputs, field, aside[5])
  end
  if run.s == RUN_PENDING or run.s == RUN_RUNNING then
    run.s = RUN_PENDING
    run.st = nil
    run.o = nil
    run.rd = now
    record_save(k.runs, field, run)
    queue_push(k, field, run)
    redis.call('SPUBLISH', k.wake, '1')
  else
    redis.call('HSET', k.runs, field, record)
    local at = run.ct
    if type(at) ~= 'number' then at = now end
    if run.s == RUN_COMPLETED then
      redis.call('ZADD', k.done, at, field)
    else
      redis.call('ZADD', k.failed, at, field)
      if run.s == RUN_TIMED_OUT then redis.call('HINCRBY', k.meta, TALLY_TIMED_OUT, 1) end
    end
  end
elseif kind == 'schedule' then
  if due_ms < 1 then return {ST_OUT_OF_RANGE} end
  if not record_decode(record) then return {ST_BAD_RECORD} end
  if redis.call('HEXISTS', k.schedules, field) == 1 then return {ST_CONFLICT} end
  redis.call('HSET', k.schedules, field, record)
  redis.call('ZADD', k.schedule_due, due_ms, field)
else
  return {ST_OUT_OF_RANGE}
end
redis.call('XDEL', k.quarantine, entry_id)
return {ST_OK}
