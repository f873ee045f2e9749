--[[ action_reap
  Periodic upkeep of one action queue, so expired leases and due delayed runs move even
  when nobody polls: takes back expired leases, promotes due delayed runs and trims kept
  completed runs, each bounded by a batch. Parked pollers are handed the runs made ready
  from the head of the queue (lib/handoff.lua).
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] pending  ZSET  run_id -> queue order
  KEYS[6] delayed  ZSET  run_id -> due ms
  KEYS[7] leases   ZSET  run_id -> lease deadline ms
  KEYS[8] failed   ZSET  run_id -> finished ms
  KEYS[9] done     ZSET  run_id -> finished ms
  KEYS[10] idempotency HASH  idempotency key -> run_id
  KEYS[11] wake    CHANNEL  sharded channel announcing new work
  KEYS[12] owned   ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[13] ended   CHANNEL  sharded channel told the ids of runs that end (client.action.wait)
  KEYS[14] parked  ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[15] polls   HASH  poll memos; a parked poller's park rides in its memo
  KEYS[16] poll_times  ZSET  poll memo -> time ms
  KEYS[17] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[18] rate    ZSET  token -> start ms: the action's starts within its rate window
  KEYS[19] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[20] history STRING  runs per minute over 72 hours (lib/history.lua)
  KEYS[21] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[22] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[23] flow_vt ZSET  flow key -> virtual time of its last run placed fairly (lib/flow.lua)
  KEYS[24] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  KEYS[25] flow_once ZSET  flow key -> ms its last run is looked at again (lib/flow.lua)
  KEYS[26] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  KEYS[27] nudge   CHANNEL  sharded channel telling forwarders the outbox has a message (lib/graph.lua)
  KEYS[28] graph    HASH  dependency states, groups' records (lib/graph.lua)
  ARGV[1] batch    at most this many items per step (1 .. 1000)
  Returns {status, ready, next_due_ms, (kind, field, why) * m}   status: OK | NO_ACTION;
          ready: runs made ready (handed or queued); then each record this call set aside
          because it does not decode (kind 'run', field its run id, why)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/handoff.lua
--@include lib/checked.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  pending = KEYS[5], delayed = KEYS[6], leases = KEYS[7], failed = KEYS[8],
  done = KEYS[9], idempotency = KEYS[10], wake = KEYS[11], owned = KEYS[12],
  ended = ended_channel(KEYS[13]), parked = KEYS[14], polls = KEYS[15], poll_times = KEYS[16],
  owners = KEYS[17], rate = KEYS[18], quarantine = KEYS[19], history = KEYS[20],
  flows = KEYS[21], flow_held = KEYS[22], flow_vt = KEYS[23], flow_rate = KEYS[24],
  flow_once = KEYS[25], aside = {},
  noted = {}, outbox = KEYS[26], nudge = KEYS[27], graph = KEYS[28]}
local batch = arg_int(ARGV[1], 1, 1000)

if not batch then return {ST_BAD_ARG, 1} end
local action
 = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local now = now_ms()
local ready = queue_expire(k, now, batch, action.backoff_ms, action.backoff_max_ms)
ready = ready + queue_promote(k, now, batch)
queue_retain(k, k.done, now, action.retention_ms, action.retention_count, batch)
if ready > 0 then handoff_ready(k, action, now, ready) end
flow_walk(k, action.flow_concurrency)
flow_sweep(k)
flow_rate_sweep(k, action, now)
flow_once_sweep(k, now)
local out = {ST_OK, ready, queue_next_due(k.delayed)}
for i, v in ipairs(k.aside) do out[3 + i] = v end
return out
