--[[ graph_suspend
  A running run ends its attempt waiting for more parents (a continuation: lib/graph.lua):
  for its current holder only, it gives up its lease without spending its attempt and
  waits, PENDING, until the runs named have ended too; then it is ready again, its
  handler called anew (`cs` counts its continuations). A message per parent registers it
  there, as an invoke's does. An identical resend is answered OK and changes nothing.
  KEYS[1] meta     HASH  counters
  KEYS[2] runs     HASH  run_id -> msgpack record
  KEYS[3] pending  ZSET  run_id -> queue order
  KEYS[4] leases   ZSET  run_id -> lease deadline ms
  KEYS[5] owned    ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[6] waiting  ZSET  run_id -> created ms: runs waiting for their parents
  KEYS[7] graph    HASH  dependency states (lib/graph.lua)
  KEYS[8] graph_idx ZSET  dependency index, by name (lib/graph.lua)
  KEYS[9] outbox   ZSET  graph messages -> ms due (lib/graph.lua)
  KEYS[10] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[11] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[12] wake    CHANNEL  sharded channel announcing new work
  KEYS[13] inputs  HASH  run_id -> input bytes
  KEYS[14] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[15] delayed ZSET  run_id -> due ms
  KEYS[16] done    ZSET  run_id -> finished ms
  KEYS[17] failed  ZSET  run_id -> finished ms
  ARGV[1] run_id
  ARGV[2] token      fencing token from the claim (1 .. 2^53), or '' (then the worker id
                     decides)
  ARGV[3] worker_id
  ARGV[4] deps       the runs to wait for, as action_invoke's deps: none the run waits
                     for already (itself or as a member of its group), nor itself
  Returns {status, run_status}   status: OK | NOT_FOUND | STALE | BAD_RECORD (its record
          does not decode: set aside into the quarantine) | CONFLICT (it waits
          for a run named already, or for itself: nothing written)
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/graph.lua
--@include lib/graph_index.lua
local k = {meta = KEYS[1], runs = KEYS[2], pending = KEYS[3], leases = KEYS[4],
  owned = KEYS[5], waiting = KEYS[6], graph = KEYS[7], graph_idx = KEYS[8], outbox = KEYS[9],
  flows = KEYS[10], flow_held = KEYS[11], wake = KEYS[12], inputs = KEYS[13],
  quarantine = KEYS[14], delayed = KEYS[15], done = KEYS[16], failed = KEYS[17]}
local run_id = ARGV[1]
local token = arg_int_or_none(ARGV[2], 1, INT_MAX)  -- false: token-less
local worker_id = ARGV[3]
local deps = graph_deps(ARGV[4])
if token == nil then return {ST_BAD_ARG, 2} end
if not deps then return {ST_BAD_ARG, 4} end
local prefix, seq = string.match(run_id, '^(.*:)(%d+)$')
if not prefix then return {ST_NOT_FOUND} end

local run, why, raw = run_load(k.runs, run_id)
if run == false then
  run_aside(k, run_id, raw, why)
  return {ST_BAD_RECORD}
end
if not run then return {ST_NOT_FOUND} end
if not run_is_holder(run, token, worker_id) then
  if run.lrk == 'w' and run_reported_by(run, token, worker_id) then return {ST_OK, run.s} end
  return {ST_STALE, run.s}
end
-- The groups the run (or its own group) waits for as a whole, each as the prefix, first
-- and last number of its members: a parent among them is one it waits for already.
local whole = {}
for _, owner in ipairs({run_id, run.dg or false}) do
  local entries = owner and graph_index_page(k.graph_idx, 'p\0' .. owner .. '\0', nil, 1000) or {}
  for _, entry in ipairs(entries) do
    local head, first, n = string.match(entry, '^p%z[^%z]*%z(.*:)(%d+)%+(%d+)$')
    if head then whole[#whole + 1] = {head, tonumber(first), tonumber(first) + tonumber(n) - 1} end
  end
end
for i = 1, #deps, 2 do
  local state = 'd\0' .. run_id .. '\0' .. deps[i]
  if deps[i] == run_id or redis.call('HEXISTS', k.graph, state) == 1 or (run.dg
      and redis.call('HEXISTS', k.graph, 'd\0' .. run.dg .. '\0' .. deps[i]) == 1) then
    return {ST_CONFLICT, run.s}
  end
  local head, number = string.match(deps[i], '^(.*:)(%d+)$')
  for _, g in ipairs(whole) do
    if head == g[1] and tonumber(number) >= g[2] and tonumber(number) <= g[3] then
      return {ST_CONFLICT, run.s}
    end
  end
end
redis.call('ZREM', k.leases, run_id)
flow_release(k, run.fk)
run.s = RUN_PENDING
run.a = math.max(run.a - 1, 0)
run.st = nil
offer_forget(run)
owned_drop(k.owned, run.o, run_id)
run.o = nil
run.lrk, run.lrt, run.lrw = 'w', run.t, worker_id
run.cs = (run.cs or 0) + 1
local added = #deps / 2
run.dn = (run.dn or 0) + added
run.dw = (run.dw or 0) + added
run.df = run.df or 0
local now = now_ms()
record_save(k.runs, run_id, run)
redis.call('ZADD', k.waiting, now, run_id)
redis.call('HSET', k.meta, 'graph', '1')
local group = 'r\0' .. prefix .. '\0' .. seq .. '\0' .. '1\0'
for i = 1, #deps, 2 do
  local pair = run_id .. '\0' .. deps[i]
  redis.call('HSET', k.graph, 'd\0' .. pair, deps[i + 1] .. ' w -1')
  redis.call('ZADD', k.graph_idx, 0, 'p\0' .. pair)
  redis.call('ZADD', k.outbox, now, group .. deps[i] .. '\0' .. deps[i + 1])
end
return {ST_OK, run.s}
