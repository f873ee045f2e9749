--[[ run_complete_many
  Complete several running runs of one action in one call, each under exactly the rules
  of run_complete (holder only, identical resends answered OK), each answered on its own.
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
  ARGV[1] worker_id
  ARGV[2] items    msgpack array, flat: run_id, token (1 .. 2^53; '' = token-less), result,
                   outcome of each item in turn (at most MAX_ITEMS items)

  Returns {status, (item_status, duplicate, run_status_or_limit) * n}
          status: OK | NO_ACTION | OUT_OF_RANGE (more than MAX_ITEMS items);
          item_status: OK | NOT_FOUND | STALE | TOO_LARGE | BAD_RECORD (its record does not
          decode: it was set aside)
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
local worker_id = ARGV[1]
local items = ARGV[2]
local RETAIN_BATCH = 100
local MAX_ITEMS = 1000

local values, n_values = arg_array_of(items, INT_MAX)  -- each value checked below
if not values or n_values % 4 ~= 0 then return {ST_BAD_ARG, 2} end
if n_values > 4 * MAX_ITEMS then return {ST_OUT_OF_RANGE, MAX_ITEMS} end
if not complete_items(values, n_values) then return {ST_BAD_ARG, 2} end

local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local now = now_ms()
local out = {ST_OK}
local applied = complete_runs(k, action, now, values, worker_id, out, 1)
if applied > 0 then
  tally_save(k, now)
  -- Trim at least as many kept runs as this call finished, so retention keeps pace.
  queue_retain(k, k.done, now, action.retention_ms, action.retention_count,
    RETAIN_BATCH + applied)
end
return out
