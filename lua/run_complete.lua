--[[ run_complete
  Complete a running run, for its current holder only. An identical resend of a complete
  that already succeeded is answered OK and changes nothing.
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] leases   ZSET  run_id -> lease deadline ms
  KEYS[6] done     ZSET  run_id -> finished ms (completed runs kept for retention)
  KEYS[7] idempotency HASH  idempotency key -> run_id
  KEYS[8] owned    ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[9] ended    CHANNEL  sharded channel told the ids of runs that end (client.action.wait)
  KEYS[10] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[11] history STRING  runs per minute over 72 hours (lib/history.lua)
  KEYS[12] pending ZSET  run_id -> queue order
  KEYS[13] wake    CHANNEL  sharded channel announcing new work
  KEYS[14] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[15] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[16] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  KEYS[17] nudge   CHANNEL  sharded channel telling forwarders the outbox has a message (lib/graph.lua)
  KEYS[18] graph    HASH  dependency states, groups' records (lib/graph.lua)
  ARGV[1] run_id
  ARGV[2] token      fencing token from the claim (1 .. 2^53), or '' (then the worker id
                     decides)
  ARGV[3] worker_id
  ARGV[4] result     output bytes
  ARGV[5] outcome
  Returns {status, duplicate, run_status}
          status: OK | NOT_FOUND | NO_ACTION | STALE | TOO_LARGE | BAD_RECORD (its record
          does not decode: it was set aside); duplicate: 1 for a resend
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/complete.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  leases = KEYS[5], done = KEYS[6], idempotency = KEYS[7], owned = KEYS[8],
  ended = ended_channel(KEYS[9]), quarantine = KEYS[10], history = KEYS[11],
  pending = KEYS[12], wake = KEYS[13], flows = KEYS[14], flow_held = KEYS[15],
  noted = {}, outbox = KEYS[16], nudge = KEYS[17], graph = KEYS[18]}
local run_id = ARGV[1]
local token = arg_int_or_none(ARGV[2], 1, INT_MAX)  -- false: token-less
local worker_id = ARGV[3]
local result = ARGV[4]
local outcome = ARGV[5]
local RETAIN_BATCH = 100

if token == nil then return {ST_BAD_ARG, 2} end
local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local now = now_ms()
local answer = {}
local applied = complete_runs(k, action, now, {run_id, token, result, outcome}, worker_id,
  answer, 0)
local status, duplicate, detail = answer[1], answer[2], answer[3]
if status == ST_TOO_LARGE then return {ST_TOO_LARGE, detail, RUN_RUNNING} end
if applied > 0 then
  tally_save(k, now)
  queue_retain(k, k.done, now, action.retention_ms, action.retention_count, RETAIN_BATCH)
end
if status == ST_NOT_FOUND or status == ST_BAD_RECORD then return {status} end
return {status, duplicate, detail}
