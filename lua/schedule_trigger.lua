--[[ schedule_trigger
  Create one run of a schedule now, from its input, whether it is active or paused; its
  next occurrence does not move (the trigger is noted apart from the occurrences in
  `schedule_last`). With an idempotency key, a second trigger with the same key answers
  the run the first created. The run goes straight to a parked poller when one may take
  it (lib/handoff.lua).
  KEYS[1] definition       HASH  the action's settings
  KEYS[2] meta             HASH  counters (seq: run ids, qseq: queue order)
  KEYS[3] runs             HASH  run_id -> msgpack record
  KEYS[4] inputs           HASH  run_id -> input bytes
  KEYS[5] pending          ZSET  run_id -> queue order
  KEYS[6] delayed          ZSET  run_id -> due ms
  KEYS[7] idempotency      HASH  idempotency key -> run_id
  KEYS[8] wake             CHANNEL  sharded channel announcing new work
  KEYS[9] schedules        HASH  schedule name -> msgpack record {i = input, ...}
  KEYS[10] schedule_due    ZSET  schedule name -> next occurrence ms
  KEYS[11] schedule_paused ZSET  schedule name -> the occurrence it holds while paused
  KEYS[12] schedule_last   HASH  schedule name -> msgpack note of the runs it created
  KEYS[13] parked          ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[14] polls           HASH  poll memos; a parked poller's park rides in its memo
  KEYS[15] poll_times      ZSET  poll memo -> time ms
  KEYS[16] owners          HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[17] owned           ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[18] leases          ZSET  run_id -> lease deadline ms
  KEYS[19] rate            ZSET  token -> start ms: the action's starts within its rate window
  KEYS[20] quarantine      STREAM  records set aside (lib/record.lua)
  ARGV[1] id_prefix  run ids are id_prefix .. sequence
  ARGV[2] name       schedule name
  ARGV[3] idem_key   idempotency key of the trigger, or ''
  Returns {status, run_id, existing}   status: OK | NO_ACTION | NOT_FOUND (no such
    schedule) | TOO_LARGE (its input is over the action's payload limit; run_id is the
    limit) | BAD_SETTING (the action's stored settings do not parse) | BAD_RECORD (its
    record does not decode: it was set aside, and fires no more)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/invoke.lua
--@include lib/schedule.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  pending = KEYS[5], delayed = KEYS[6], idempotency = KEYS[7], wake = KEYS[8],
  schedules = KEYS[9], schedule_due = KEYS[10], schedule_paused = KEYS[11],
  schedule_last = KEYS[12], parked = KEYS[13], polls = KEYS[14], poll_times = KEYS[15],
  owners = KEYS[16], owned = KEYS[17], leases = KEYS[18], rate = KEYS[19],
  quarantine = KEYS[20]}
local id_prefix = ARGV[1]
local name = ARGV[2]
local idem_key = ARGV[3]

local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
if action.bad then return {ST_BAD_SETTING} end
local schedule = schedule_load(k, name)
if schedule == nil then return {ST_NOT_FOUND} end
if not schedule then return {ST_BAD_RECORD} end
local input = schedule.i or ''
if action.max_payload >= 0 and #input > action.max_payload then
  return {ST_TOO_LARGE, action.max_payload}
end
if idem_key ~= '' then
  local existing = redis.call('HGET', k.idempotency, idem_key)
  if existing then return {ST_OK, existing, 1} end
end

local now = now_ms()
local run_id = invoke_run(k, action, id_prefix, input, '', now, now, idem_key, 0, '')
schedule_note(k.schedule_last, name, run_id, now, nil)
return {ST_OK, run_id, 0}
