--[[ action_invoke_many
  Create several runs of a registered action in one call, all ready now, with the same
  labels and priority. The runs are queued in the order given; parked pollers are handed
  runs from the head of the queue, one each while one may take it (lib/handoff.lua).
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters (seq: run ids, qseq: queue order)
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] pending  ZSET  run_id -> queue order (lib/priority.lua)
  KEYS[6] wake     CHANNEL  sharded channel announcing new work
  KEYS[7] parked   ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[8] polls    HASH  poll memos; a parked poller's park rides in its memo
  KEYS[9] poll_times  ZSET  poll memo -> time ms
  KEYS[10] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[11] owned   ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[12] leases  ZSET  run_id -> lease deadline ms
  KEYS[13] rate    ZSET  token -> start ms: the action's starts within its rate window
  KEYS[14] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[15] flow_vt ZSET  flow key -> virtual time of its last run placed fairly (lib/flow.lua)
  KEYS[16] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  KEYS[17] waiting  ZSET  run_id -> created ms: runs waiting for their parents (lib/graph.lua)
  KEYS[18] graph  HASH  dependency states (lib/graph.lua)
  KEYS[19] graph_idx  ZSET  dependency index, by name (lib/graph.lua)
  KEYS[20] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  ARGV[1] id_prefix   run ids are id_prefix .. sequence
  ARGV[2] labels      msgpack map of type-tagged labels, or ''
  ARGV[3] priority    0 .. 255: ready runs of a lower value are claimed first
  ARGV[4] trace       the producer's packed trace context (run field tr), or '' for none
  ARGV[5] flow_key    the runs' flow key (lib/flow.lua; run field fk), or '' for none: at
                      most 255 bytes, no NUL; placed in the key's turns when the action is
                      fair (a run of a key at its limit is held by the claim that meets it)
  ARGV[6] deps        the parents every run waits for, as action_invoke's deps ('' for
                      none): then the runs wait (lib/graph.lua) instead of being queued;
                      at most 10000 parents in all (runs times parents); not with a flow key
  ARGV[7] batch       the id of the batch every run is a member of (lib/batch.lua), or
                      '': 1 .. 255 bytes, no NUL
  ARGV[8..n] inputs   payload bytes, one per run (at most 1000)
  Returns {status, first_seq, n}   run ids are id_prefix .. (first_seq + i), i = 0 .. n-1
          status: OK | NO_ACTION | TOO_LARGE (then first_seq is the limit, n the index)
          | OUT_OF_RANGE (no input, or too many; nothing written) | BAD_SETTING (the
          action's stored settings do not parse; nothing written) | CONFLICT (a flow key
          for an action that dedups, throttles or debounces by key; nothing written)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/action.lua
--@include lib/priority.lua
--@include lib/handoff.lua
--@include lib/num.lua
--@include lib/checked.lua
--@include lib/ids.lua
--@include lib/flow.lua
--@include lib/graph.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  pending = KEYS[5], wake = KEYS[6], parked = KEYS[7], polls = KEYS[8], poll_times = KEYS[9],
  owners = KEYS[10], owned = KEYS[11], leases = KEYS[12], rate = KEYS[13], flows = KEYS[14],
  flow_vt = KEYS[15], flow_rate = KEYS[16], waiting = KEYS[17], graph = KEYS[18], graph_idx = KEYS[19], outbox = KEYS[20]}
local id_prefix = ARGV[1]
local labels = ARGV[2]
local priority = arg_int(ARGV[3], 0, PRIORITY_MAX)
local trace = ARGV[4]
local flow_key = ARGV[5]
local deps = ARGV[6]
local batch = ARGV[7]
local FIRST_INPUT = 8
local MAX_RUNS = 1000

if labels ~= '' and not arg_map(labels) then return {ST_BAD_ARG, 2} end
if not priority then return {ST_BAD_ARG, 3} end
if #flow_key > 255 or string.find(flow_key, '\0', 1, true) then return {ST_BAD_ARG, 5} end
local n = #ARGV - FIRST_INPUT + 1
if n < 1 or n > MAX_RUNS then
  return {ST_OUT_OF_RANGE, MAX_RUNS, n}
end
if deps == '' then
  deps = nil
else
  deps = graph_deps(deps)
  if not deps or flow_key ~= '' or n * #deps / 2 > 10000 then return {ST_BAD_ARG, 6} end
end
if #batch > 255 or string.find(batch, '\0', 1, true) then return {ST_BAD_ARG, 7} end
local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
if action.bad then return {ST_BAD_SETTING} end
local flow = nil
if flow_key ~= '' then
  flow = flow_settings(k.definition, flow_key)
  local once = flow_once_settings(k.definition)
  if not flow or once == false then return {ST_BAD_SETTING} end
  -- Dedup, throttle and debounce answer each invoke on its own: one at a time.
  if once > 0 then return {ST_CONFLICT} end
end

if action.max_payload >= 0 then
  for i = FIRST_INPUT, #ARGV do
    if #ARGV[i] > action.max_payload then
      return {ST_TOO_LARGE, action.max_payload, i - FIRST_INPUT}
    end
  end
end

local now = now_ms()
local first = ids_take(k.meta, 'seq', n, now)
local run = {s = RUN_PENDING, a = 0, t = 0, c = now, mr = action.max_retries}
if priority > 0 then run.p = priority end
if labels ~= '' then run.lb = cmsgpack.unpack(labels) end
if trace ~= '' then run.tr = trace end
if batch ~= '' then
  run.bt = batch
  local group = string.format('b\0%s\0%d\0%d\0', id_prefix, first, n)
  redis.call('ZADD', k.outbox, now, group .. batch)
end
if deps then
  local input_fields = {}
  for i = 0, n - 1 do
    input_fields[2 * i + 1] = string.format('%s%d', id_prefix, first + i)
    input_fields[2 * i + 2] = ARGV[FIRST_INPUT + i]
  end
  redis.call('HSET', k.inputs, unpack(input_fields))
  graph_wait(k, id_prefix, first, n, run, deps, now)
  return {ST_OK, first, n}
end
-- Scores base_score + step * i: in arrival order (qseq), or in the key's turns.
local base_score, step
if flow then
  run.fk = flow_key
  run.fw = flow.step
end
if flow and flow.step then
  base_score, step = flow_place_many(k, flow_key, flow.step, priority, n), flow.step
else
  local last_q = redis.call('HINCRBY', k.meta, 'qseq', n)
  base_score, step = priority_score(priority, last_q - n + 1), 1
end
local record = cmsgpack.pack(run)
local run_fields, input_fields, queue_args = {}, {}, {}
-- Ids and scores as text made here, not by Redis from numbers (lib/num.lua).
local format, id_format = string.format, '%s%d'
for i = 0, n - 1 do
  local run_id = format(id_format, id_prefix, first + i)
  local j = 2 * i
  run_fields[j + 1] = run_id
  run_fields[j + 2] = record
  input_fields[j + 1] = run_id
  input_fields[j + 2] = ARGV[FIRST_INPUT + i]
  queue_args[j + 1] = num_arg(base_score + step * i)
  queue_args[j + 2] = run_id
end
redis.call('HSET', k.runs, unpack(run_fields))
redis.call('HSET', k.inputs, unpack(input_fields))
redis.call('ZADD', k.pending, unpack(queue_args))
handoff_ready(k, action, now, n)
return {ST_OK, first, n}
