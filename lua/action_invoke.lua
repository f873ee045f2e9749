--[[ action_invoke
  Create a run of a registered action: ready now, or delayed until a time. A run ready
  now goes straight to a parked poller when one may take it (lib/handoff.lua).
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters (seq: run ids, qseq: queue order)
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] pending  ZSET  run_id -> queue order (lib/priority.lua)
  KEYS[6] delayed  ZSET  run_id -> due ms
  KEYS[7] idempotency HASH  idempotency key -> run_id
  KEYS[8] wake     CHANNEL  sharded channel announcing new work
  KEYS[9] parked   ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[10] polls   HASH  poll memos; a parked poller's park rides in its memo
  KEYS[11] poll_times  ZSET  poll memo -> time ms
  KEYS[12] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[13] owned   ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[14] leases  ZSET  run_id -> lease deadline ms
  KEYS[15] rate    ZSET  token -> start ms: the action's starts within its rate window
  KEYS[16] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[17] flow_vt ZSET  flow key -> virtual time of its last run placed fairly (lib/flow.lua)
  KEYS[18] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[19] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  KEYS[20] flow_once ZSET  flow key -> ms its last run is looked at again (lib/flow.lua)
  KEYS[21] waiting  ZSET  run_id -> created ms: runs waiting for their parents (lib/graph.lua)
  KEYS[22] graph  HASH  dependency states (lib/graph.lua)
  KEYS[23] graph_idx  ZSET  dependency index, by name (lib/graph.lua)
  KEYS[24] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  ARGV[1] id_prefix   run ids are id_prefix .. sequence
  ARGV[2] input       payload bytes
  ARGV[3] labels      msgpack map of type-tagged labels, or ''
  ARGV[4] delay_ms    run no earlier than now + delay_ms (0 .. MAX_TIME_MS)
  ARGV[5] run_at_ms   run no earlier than this server time (0 = not set; at most MAX_TIME_MS)
  ARGV[6] idem_key    idempotency key, or ''
  ARGV[7] priority    0 .. 255: ready runs of a lower value are claimed first; FIFO within one
  ARGV[8] trace       the producer's packed trace context (run field tr), or '' for none
  ARGV[9] flow_key    the run's flow key (lib/flow.lua; run field fk), or '' for none: at
                      most 255 bytes, no NUL
  ARGV[10] deps     msgpack array: parent run id, policy ('f' fail, 'i' ignore, 'r' run
                    anyway) of each parent the run waits for (lib/graph.lua), at most
                    10000 parents, none twice, no NUL in an id; '' for none. Not with a
                    flow key.
  ARGV[11] batch    the id of the batch the run is a member of (lib/batch.lua), or '':
                    1 .. 255 bytes, no NUL
  With a flow key, an action's dedup, throttle or debounce (lib/flow.lua, flow_once)
  may answer with the key's last run instead (existing 1).
  Returns {status, run_id, existing, handed}   status: OK | NO_ACTION | TOO_LARGE (then
          run_id is the limit) | BAD_SETTING (the action's stored settings do not parse;
          nothing written); handed 1: the new run went straight to a parked poller
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/invoke.lua
--@include lib/checked.lua
--@include lib/flow.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  pending = KEYS[5], delayed = KEYS[6], idempotency = KEYS[7], wake = KEYS[8], parked = KEYS[9],
  polls = KEYS[10], poll_times = KEYS[11], owners = KEYS[12], owned = KEYS[13], leases = KEYS[14],
  rate = KEYS[15], flows = KEYS[16], flow_vt = KEYS[17], flow_held = KEYS[18], flow_rate = KEYS[19],
  flow_once = KEYS[20], waiting = KEYS[21], graph = KEYS[22], graph_idx = KEYS[23], outbox = KEYS[24]}
local id_prefix = ARGV[1]
local input = ARGV[2]
local labels = ARGV[3]
local MAX_TIME_MS = 253402300799999  -- the end of the year 9999
local delay_ms = arg_int(ARGV[4], 0, MAX_TIME_MS)
local run_at_ms = arg_int(ARGV[5], 0, MAX_TIME_MS)
local idem_key = ARGV[6]
local priority = arg_int(ARGV[7], 0, PRIORITY_MAX)
local trace = ARGV[8]
local flow_key = ARGV[9]

if labels ~= '' and not arg_map(labels) then return {ST_BAD_ARG, 3} end
if not delay_ms then return {ST_BAD_ARG, 4} end
if not run_at_ms then return {ST_BAD_ARG, 5} end
if not priority then return {ST_BAD_ARG, 7} end
if #flow_key > 255 or string.find(flow_key, '\0', 1, true) then return {ST_BAD_ARG, 9} end
local deps = ARGV[10]
local batch = ARGV[11]
if deps == '' then
  deps = nil
else
  deps = graph_deps(deps)
  if not deps or flow_key ~= '' then return {ST_BAD_ARG, 10} end
end
if batch == '' then
  batch = nil
elseif #batch > 255 or string.find(batch, '\0', 1, true) then
  return {ST_BAD_ARG, 11}
end

local action = action_load_lean(k.definition)
if not action then return {ST_NO_ACTION} end
if action.bad then return {ST_BAD_SETTING} end
local flow = nil
if flow_key ~= '' then
  flow = flow_settings(k.definition, flow_key)
  if not flow then return {ST_BAD_SETTING} end
else
  flow_key = nil
end

if action.max_payload >= 0 and #input > action.max_payload then
  return {ST_TOO_LARGE, action.max_payload}
end
if idem_key ~= '' then
  local existing = redis.call('HGET', k.idempotency, idem_key)
  if existing then return {ST_OK, existing, 1} end
end

local now = now_ms()
local due = now + delay_ms
if run_at_ms > due then due = run_at_ms end
local once, once_ms = 0, 0
if flow_key then
  once, once_ms = flow_once_settings(k.definition)
  if not once then return {ST_BAD_SETTING} end
end
if once > 0 then
  local existing = flow_once_existing(k, once, once_ms, flow_key, input, now)
  if existing then return {ST_OK, existing, 1} end
  if once == FLOW.DEBOUNCE and now + once_ms > due then due = now + once_ms end
end
local run_id, handed = invoke_run(k, action, id_prefix, input, labels, now, due, idem_key,
  priority, trace, flow_key, flow, deps, batch)
if once > 0 then flow_once_record(k, once, once_ms, flow_key, run_id, now, due) end
return {ST_OK, run_id, 0, handed and 1 or 0}
