--[[ graph_resolve
  Tell children, in their queue, how a parent ended (a message 'e' or the answer to an
  'r', carried here: lib/graph.lua). Each (child, parent) pair keeps the parent's state
  and the version it was told; a version not newer than that changes nothing, so a
  message carried twice, or late, is harmless. Then, per child:
  - waiting, and a parent of the fail policy ended otherwise than completed: the child
    ends as well, CANCELLED when that parent was cancelled, else FAILED, its error naming
    the parent (`fb`); runs that depend on it are told in turn (its own end message);
  - waiting, and no parent is left to end: it becomes ready (or delayed, until its time),
    exactly once (it leaves `waiting` in the same step);
  - ended by a parent (`fb`), and no parent of the fail policy is failed any more (one
    was retried and completed): it gets a fresh set of attempts, waiting or ready; when
    another still fails it, it names that one instead (and ends as its end makes it).
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] pending  ZSET  run_id -> queue order
  KEYS[5] delayed  ZSET  run_id -> due ms
  KEYS[6] failed   ZSET  run_id -> finished ms
  KEYS[7] waiting  ZSET  run_id -> created ms: runs waiting for their parents
  KEYS[8] graph    HASH  dependency states (lib/graph.lua)
  KEYS[9] outbox   ZSET  graph messages -> ms due (lib/graph.lua)
  KEYS[10] owned   ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[11] ended   CHANNEL  sharded channel told the ids of runs that end (client.action.wait)
  KEYS[12] wake    CHANNEL  sharded channel announcing new work
  KEYS[13] history STRING  runs per minute over 72 hours (lib/history.lua)
  KEYS[14] nudge   CHANNEL  sharded channel telling forwarders the outbox has a message (lib/graph.lua)
  KEYS[15] graph_idx  ZSET  dependency index, by name (lib/graph.lua)
  KEYS[16] inputs  HASH  run_id -> input bytes
  KEYS[17] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[18] leases  ZSET  run_id -> lease deadline ms
  KEYS[19] done    ZSET  run_id -> finished ms
  ARGV[1] items    msgpack array: child run id, parent run id, the parent's state (-1: no
                   such parent; else the status it ended with), its version, of each (at
                   most 1000 items)
  A child whose record does not decode is set aside into the quarantine (lib/run.lua).
  Returns {status, ready, ended, revived, (kind, field, why) * m}   status: OK |
          NO_ACTION; how many children became ready, ended with a parent, got attempts
          again; then each record set aside (a child whose record does not decode)
]]
--@include lib/status.lua
--@include lib/graph_index.lua
--@include lib/clock.lua
--@include lib/checked.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], pending = KEYS[4],
  delayed = KEYS[5], failed = KEYS[6], waiting = KEYS[7], graph = KEYS[8],
  outbox = KEYS[9], owned = KEYS[10], ended = ended_channel(KEYS[11]), wake = KEYS[12],
  history = KEYS[13], noted = {}, nudge = KEYS[14], graph_idx = KEYS[15], inputs = KEYS[16],
  quarantine = KEYS[17], leases = KEYS[18], done = KEYS[19], aside = {}}
local items = arg_array(ARGV[1], 4000)
if not items or #items % 4 ~= 0 then return {ST_BAD_ARG, 1} end
for i = 1, #items, 4 do
  if type(items[i]) ~= 'string' or type(items[i + 1]) ~= 'string'
      or type(items[i + 2]) ~= 'number' or type(items[i + 3]) ~= 'number' then
    return {ST_BAD_ARG, 1}
  end
end
local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local STATUS_NAMES = {[RUN_COMPLETED] = 'COMPLETED', [RUN_FAILED] = 'FAILED',
  [RUN_CANCELLED] = 'CANCELLED', [RUN_TIMED_OUT] = 'TIMED_OUT'}
local now = now_ms()
local ready, ended, revived, woken = 0, 0, 0, false
-- Each child's record is read once per call and written once at its end (a child that
-- waits for many parents is told of many in one call), and whether it is in `waiting`
-- looked up once (kept here as this call moves it).
local records, changed, waiting = {}, {}, {}

-- Is a parent in `state` (its status as text, or 'w') under `policy` failing its child?
local function failing(policy, state)
  return policy == 'f' and state ~= 'w' and state ~= tostring(RUN_COMPLETED)
end

-- What to say of a child ended by parent `parent` (`told`: its status, -1 none).
local function blamed(parent, told)
  if told == -1 then return 'parent ' .. parent .. ' not found' end
  return 'parent ' .. parent .. ' ended ' .. STATUS_NAMES[told]
end

-- A parent of `child` that still fails it (policy f, ended otherwise than completed),
-- and how it ended: among the first 1000 of its parents, in id order (nil: none there).
local function still_failing(child)
  local prefix = 'p\0' .. child .. '\0'
  local entries = graph_index_page(k.graph_idx, prefix, nil, 1000)
  for _, entry in ipairs(entries) do
    local parent = string.sub(entry, #prefix + 1)
    local state = redis.call('HGET', k.graph, 'd\0' .. child .. '\0' .. parent) or ''
    local policy, told = string.match(state, '^(%a) (%-?%w+) ')
    if failing(policy, told) then return parent, tonumber(told) end
  end
  return nil
end

-- Put the child `run_id` (`run`, PENDING, out of `waiting`) in the queue: delayed until
-- its time, or ready now.
local function release(run_id, run)
  if run.rd and run.rd > now then
    redis.call('ZADD', k.delayed, run.rd, run_id)
  else
    run.rd = now
    queue_push(k, run_id, run)
    woken = true
  end
  ready = ready + 1
end

for i = 1, #items, 4 do
  local child, parent, told, version = items[i], items[i + 1], items[i + 2], items[i + 3]
  local field = 'd\0' .. child .. '\0' .. parent
  local state = redis.call('HGET', k.graph, field)
  local policy, was, seen = nil, nil, nil
  if state then policy, was, seen = string.match(state, '^(%a) (%-?%w+) (%-?%d+)$') end
  local run = false
  if policy and tonumber(seen) < version then
    run = records[child]
    if run == nil then
      local why, raw
      run, why, raw = run_load(k.runs, child)
      if run == false then run_aside(k, child, raw, why) end
      run = run or false
      records[child] = run
    end
  end
  if run then
    changed[child] = true
    local now_state = tostring(told)  -- '-1': no such parent, failing as FAILED does
    redis.call('HSET', k.graph, field, policy .. ' ' .. now_state .. ' ' .. version)
    if was == 'w' then run.dw = run.dw - 1 end
    run.df = run.df + (failing(policy, now_state) and 1 or 0) - (failing(policy, was) and 1 or 0)
    local waits = waiting[child]
    if waits == nil then
      waits = redis.call('ZSCORE', k.waiting, child) ~= false
    end
    waiting[child] = waits
    if waits and run.df > 0 then
      waiting[child] = false
      redis.call('ZREM', k.waiting, child)
      run.fb = parent
      run.err = blamed(parent, told)
      run.tb = nil
      queue_bury(k, child, run, now, told == RUN_CANCELLED and RUN_CANCELLED or RUN_FAILED)
      ended = ended + 1
    elseif waits and run.dw == 0 then
      waiting[child] = false
      redis.call('ZREM', k.waiting, child)
      release(child, run)
    elseif run.fb and run.df == 0 and (run.s == RUN_FAILED or run.s == RUN_CANCELLED) then
      redis.call('ZREM', k.failed, child)
      queue_unbury(run, action.max_retries, now)
      run.fb, run.err, run.tb = nil, nil, nil
      revived = revived + 1
      if run.dw > 0 then
        waiting[child] = true
        redis.call('ZADD', k.waiting, now, child)
      else
        release(child, run)
      end
    elseif run.fb == parent and run.df > 0 and not failing(policy, now_state)
        and (run.s == RUN_FAILED or run.s == RUN_CANCELLED) then
      -- The parent it blamed completed since, but another still fails it: it blames
      -- that one, and ends as that one's end makes it (its own dependents were told).
      local other, how = still_failing(child)
      if other then
        run.fb, run.err = other, blamed(other, how)
        run.s = how == RUN_CANCELLED and RUN_CANCELLED or RUN_FAILED
      end
    end
  end
end
for child in pairs(changed) do record_save(k.runs, child, records[child]) end
if woken then redis.call('SPUBLISH', k.wake, '1') end
tally_save(k, now)
local out = {ST_OK, ready, ended, revived}
for _, value in ipairs(k.aside) do out[#out + 1] = value end
return out
