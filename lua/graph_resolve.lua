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
  A child that is a group (lib/graph.lua, "Groups") keeps the count in its record, then
  each member takes the change in as a run told it would (the same three cases), a page
  at a time: this call begins, and a message 'w' in the outbox (`sweeps`, the
  forwarder's) goes on from where it stopped. A member that took a change in already
  is passed over, so a page carried twice is harmless.
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
  ARGV[1] items    msgpack array: child run id (or group), parent run id, the parent's
                   state (-1: no such parent; else the status it ended with), its
                   version, of each (at most 1000 items)
  ARGV[2] sweeps   msgpack array: group, version, cursor of each message 'w' carried here
                   (at most 100): its members from number `cursor` on take in the
                   group's change `version` (none once the group changed again)
  ARGV[3] reports  msgpack array: child, group, changes, ended, bad, status, blamed of
                   each group a child waits for as a whole (at most 1000; lib/graph.lua,
                   "Groups"): how its members stand after `changes` ends, `ended` of them
                   ended, `bad` otherwise than completed, `blamed` one of those (ending
                   `status`; '' for none); a report not newer than the last told changes
                   nothing, else the child counts the difference as told by each member
  A child whose record does not decode is set aside into the quarantine (lib/run.lua).
  Returns {status, ready, ended, revived, cursors, (kind, field, why) * m}   status: OK |
          NO_ACTION; how many children became ready, ended with a parent, got attempts
          again; cursors: per sweep, where the next page begins ('' when none is left);
          then each record set aside (a child whose record does not decode)
]]
--@include lib/status.lua
--@include lib/graph_index.lua
--@include lib/clock.lua
--@include lib/checked.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/graph_group.lua
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
local sweeps = arg_array(ARGV[2], 300)
if not sweeps or #sweeps % 3 ~= 0 then return {ST_BAD_ARG, 2} end
for i = 1, #sweeps, 3 do
  if type(sweeps[i]) ~= 'string' or type(sweeps[i + 1]) ~= 'number'
      or type(sweeps[i + 2]) ~= 'number' or sweeps[i + 2] < 0 then
    return {ST_BAD_ARG, 2}
  end
end
local reports = arg_array(ARGV[3], 7000)
if not reports or #reports % 7 ~= 0 then return {ST_BAD_ARG, 3} end
for i = 1, #reports, 7 do
  for j = 0, 6 do
    local want = (j == 0 or j == 1 or j == 6) and 'string' or 'number'
    if type(reports[i + j]) ~= want then return {ST_BAD_ARG, 3} end
  end
end
-- Members a call takes a group's change to, at most: each is a record read and written.
local SWEEP_MEMBERS = 1000
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
-- Done once at the end, each in a few calls for all: the runs released into `pending`
-- (in order), and the children whose place in `waiting` changed (`waiting` says where).
local released, moved = {}, {}

-- Is a parent in `state` (its status as text, or 'w') under `policy` failing its child?
local function failing(policy, state)
  return policy == 'f' and state ~= 'w' and state ~= tostring(RUN_COMPLETED)
end

-- What to say of a child ended by parent `parent` (`told`: its status, -1 none).
local function blamed(parent, told)
  if told == -1 then return 'parent ' .. parent .. ' not found' end
  return 'parent ' .. parent .. ' ended ' .. STATUS_NAMES[told]
end

-- A parent of `child` (a run or a group) that still fails it (policy f, ended otherwise
-- than completed), and how it ended: among the first 1000 of its parents, in id order
-- (nil: none there).
local function still_failing(child)
  local prefix = 'p\0' .. child .. '\0'
  local entries = graph_index_page(k.graph_idx, prefix, nil, 1000)
  for _, entry in ipairs(entries) do
    local parent = string.sub(entry, #prefix + 1)
    local state = redis.call('HGET', k.graph, 'd\0' .. child .. '\0' .. parent) or ''
    local policy, told = string.match(state, '^(%a) (%-?%w+) ')
    if told == 'g' then  -- a group: failing while any member is, that member named
      local bad, how, member = string.match(state, '^%a g %d+ (%d+) %-?%d+ (%-?%d+) (.*)$')
      if policy == 'f' and tonumber(bad or 0) > 0 then
        return member ~= '' and member or parent, tonumber(how)
      end
    elseif failing(policy, told) then
      return parent, tonumber(told)
    end
  end
  return nil
end

-- Groups read in this call (false: none such, or its record does not decode), and
-- those it changed.
local groups, regrouped = {}, {}
local function group_load(group)
  local grp = groups[group]
  if grp == nil then
    local value = graph_group_load(k.graph, group)
    grp = value and type(value.dw) == 'number' and type(value.df) == 'number' and value
      or false
    groups[group] = grp
  end
  return grp
end

-- The child's record, read once per call (false: none, or set aside).
local function child_load(child)
  return run_load_once(k, records, child)
end

-- A parent failing the run `run` of a group, and how it ended: one of its own, else the
-- group's (nil: none).
local function blame_of(child, run)
  local parent, how = still_failing(child)
  if parent then return parent, how end
  local grp = run.dg and group_load(run.dg)
  if grp and grp.df > 0 and grp.fb then return grp.fb, grp.ft end
  return nil
end

-- Put the child `run_id` (`run`, PENDING, out of `waiting`) in the queue: delayed until
-- its time, or ready now.
local function release(run_id, run)
  if run.rd and run.rd > now then
    redis.call('ZADD', k.delayed, run.rd, run_id)
  else
    run.rd = now
    released[#released + 1] = run_id
    woken = true
  end
  ready = ready + 1
end

-- The child `child` (`run`, its counts `dw` and `df` just changed; `parent`, told
-- `told`, the parent to blame should it end now) as its counts make it: ended, ready,
-- back with fresh attempts, or naming another parent. `renamed`: the parent it names
-- is no longer failing it.
local function decide(child, run, parent, told, renamed)
  changed[child] = true
  local waits = waiting[child]
  if waits == nil then
    waits = redis.call('ZSCORE', k.waiting, child) ~= false
  end
  waiting[child] = waits
  if waits and run.df > 0 then
    waiting[child], moved[child] = false, true
    run.fb = parent
    run.err = blamed(parent, told)
    run.tb = nil
    queue_bury(k, child, run, now, told == RUN_CANCELLED and RUN_CANCELLED or RUN_FAILED)
    ended = ended + 1
  elseif waits and run.dw == 0 then
    waiting[child], moved[child] = false, true
    release(child, run)
  elseif run.fb and run.df == 0 and (run.s == RUN_FAILED or run.s == RUN_CANCELLED) then
    redis.call('ZREM', k.failed, child)
    queue_unbury(run, action.max_retries, now)
    run.fb, run.err, run.tb = nil, nil, nil
    revived = revived + 1
    if run.dw > 0 then
      waiting[child], moved[child] = true, true
    else
      release(child, run)
    end
  elseif renamed and run.df > 0 and (run.s == RUN_FAILED or run.s == RUN_CANCELLED) then
    -- The parent it blamed completed since, but another still fails it: it blames
    -- that one, and ends as that one's end makes it (its own dependents were told).
    local other, how = blame_of(child, run)
    if other then
      run.fb, run.err = other, blamed(other, how)
      run.s = how == RUN_CANCELLED and RUN_CANCELLED or RUN_FAILED
    end
  end
end

-- The member `member` of `group` (`grp`) takes in the group's counts, if it has not.
local function take_in(member, group, grp)
  local run = child_load(member)
  if not run or run.dg ~= group then return end
  local gw, gf = tonumber(run.gw) or grp.dw, tonumber(run.gf) or 0
  local renamed = run.fb ~= nil and run.fb ~= grp.fb and grp.df > 0 and gf > 0
    and not still_failing(member)
  if gw == grp.dw and gf == grp.df and not renamed then return end
  run.dw, run.df = run.dw + grp.dw - gw, run.df + grp.df - gf
  run.gw, run.gf = grp.dw, grp.df
  decide(member, run, grp.fb or '', grp.ft or -1, renamed)
end

-- Take `group`'s change `version` to its members from number `from` on, as many as
-- `budget` allows; where the next page begins ('' when none is left), and the budget
-- left.
local function sweep(group, version, from, budget)
  local grp = group_load(group)
  local prefix, first, n = graph_group_of(group)
  if not grp or grp.v ~= version or not prefix then return '', budget end
  local last, members = math.min(n, from + budget), {}
  for i = from, last - 1 do members[#members + 1] = string.format('%s%d', prefix, first + i) end
  -- The page's records and places in `waiting`, read in a few calls for all of them.
  run_load_many(k, records, members)
  if #members > 0 then
    local places = redis.call('ZMSCORE', k.waiting, unpack(members))
    for i, member in ipairs(members) do
      if waiting[member] == nil then waiting[member] = places[i] ~= false end
    end
  end
  for _, member in ipairs(members) do take_in(member, group, grp) end
  return last < n and string.format('%d', last) or '', budget - math.max(last - from, 0)
end

for i = 1, #items, 4 do
  local child, parent, told, version = items[i], items[i + 1], items[i + 2], items[i + 3]
  local field = 'd\0' .. child .. '\0' .. parent
  local state = redis.call('HGET', k.graph, field)
  local policy, was, seen = nil, nil, nil
  if state then policy, was, seen = string.match(state, '^(%a) (%-?%w+) (%-?%d+)$') end
  if policy and tonumber(seen) < version then
    local group = graph_group_of(child) ~= nil
    local run
    if group then run = group_load(child) else run = child_load(child) end
    if run then
      local now_state = tostring(told)  -- '-1': no such parent, failing as FAILED does
      redis.call('HSET', k.graph, field, policy .. ' ' .. now_state .. ' ' .. version)
      if was == 'w' then run.dw = run.dw - 1 end
      run.df = run.df + (failing(policy, now_state) and 1 or 0)
        - (failing(policy, was) and 1 or 0)
      local renamed = run.fb == parent and not failing(policy, now_state)
      if group then
        -- The group names a parent that fails it: the first that did, while it does.
        if run.df == 0 then
          run.fb, run.ft = nil, nil
        elseif run.fb == parent and failing(policy, now_state) then
          run.ft = told
        elseif run.fb == parent or not run.fb then
          if failing(policy, now_state) then
            run.fb, run.ft = parent, told
          else
            run.fb, run.ft = still_failing(child)
          end
        end
        run.v = (run.v or 0) + 1
        regrouped[child] = true
      else
        decide(child, run, parent, told, renamed)
      end
    end
  end
end
-- Reports of groups a child waits for as a whole: the child (a run or a group) counts
-- what changed since the last report told, as the members' own end messages would, and
-- names the member the group blames.
for i = 1, #reports, 7 do
  local child, group, changes, ends, bad, how, member = unpack(reports, i, i + 6)
  local field = 'd\0' .. child .. '\0' .. group
  local state = redis.call('HGET', k.graph, field) or ''
  local policy, was_ends, was_bad, seen, was_member =
    string.match(state, '^(%a) g (%d+) (%d+) (%-?%d+) %-?%d+ (.*)$')
  if policy and tonumber(seen) < changes then
    local is_group = graph_group_of(child) ~= nil
    local run
    if is_group then run = group_load(child) else run = child_load(child) end
    if run then
      if bad == 0 then
        how, member = RUN_COMPLETED, ''
      elseif not (STATUS_NAMES[how] or how == -1) then
        how = RUN_FAILED
      end
      local blamed_now = bad > 0 and (member ~= '' and member or group) or ''
      redis.call('HSET', k.graph, field,
        string.format('%s g %d %d %d %d %s', policy, ends, bad, changes, how, blamed_now))
      run.dw = run.dw - (ends - tonumber(was_ends))
      local fails = policy == 'f' and bad > 0
      if policy == 'f' then run.df = run.df + bad - tonumber(was_bad) end
      local renamed = run.fb ~= nil and was_member ~= '' and run.fb == was_member
        and blamed_now ~= was_member
      if is_group then
        if run.df == 0 then
          run.fb, run.ft = nil, nil
        elseif fails and (not run.fb or renamed or run.fb == blamed_now) then
          run.fb, run.ft = blamed_now, how
        elseif renamed then
          run.fb, run.ft = still_failing(child)
        end
        run.v = (run.v or 0) + 1
        regrouped[child] = true
      else
        decide(child, run, blamed_now ~= '' and blamed_now or group, how, renamed)
      end
    end
  end
end
-- The groups changed: each saved, and its members told, as far as this call goes; a
-- message 'w' has the forwarders carry on from there.
local budget = SWEEP_MEMBERS
for group in pairs(regrouped) do
  local grp = groups[group]
  redis.call('HSET', k.graph, 'g\0' .. group, cmsgpack.pack(grp))
  local cursor
  cursor, budget = sweep(group, grp.v, 0, budget)
  local message, before = string.format('w\0%s\0%d', group, grp.v),
    string.format('w\0%s\0%d', group, grp.v - 1)
  redis.call('ZREM', k.outbox, before)  -- a page of it carried later changes nothing
  redis.call('HDEL', k.graph, 'c\0' .. before)
  if cursor ~= '' then
    redis.call('ZADD', k.outbox, now, message)
    redis.call('HSET', k.graph, 'c\0' .. message, cursor)
    redis.pcall('SPUBLISH', k.nudge, '1')
  end
end
local cursors = {}
for i = 1, #sweeps, 3 do
  cursors[#cursors + 1], budget = sweep(sweeps[i], sweeps[i + 1], sweeps[i + 2], budget)
end
if #released > 0 then  -- queued in release order, each after those queued before
  local last, scores = redis.call('HINCRBY', k.meta, 'qseq', #released), {}
  for i, run_id in ipairs(released) do
    local seq = last - #released + i
    scores[2 * i - 1] = num_arg(priority_score(records[run_id].p or 0, seq))
    scores[2 * i] = run_id
  end
  graph_bulk('ZADD', k.pending, scores)
end
local gone, back, at = {}, {}, string.format('%d', now)
for child in pairs(moved) do
  if waiting[child] then
    back[#back + 1] = at
    back[#back + 1] = child
  else
    gone[#gone + 1] = child
  end
end
if #gone > 0 then graph_bulk('ZREM', k.waiting, gone) end
if #back > 0 then graph_bulk('ZADD', k.waiting, back) end
local saved, pack = {}, cmsgpack.pack
for child in pairs(changed) do
  saved[#saved + 1] = child
  saved[#saved + 1] = pack(records[child])
end
if #saved > 0 then graph_bulk('HSET', k.runs, saved) end
if woken then redis.call('SPUBLISH', k.wake, '1') end
tally_save(k, now)
local out = {ST_OK, ready, ended, revived, cursors}
for _, value in ipairs(k.aside) do out[#out + 1] = value end
return out
