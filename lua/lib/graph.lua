--[[ lib/graph
  Runs that depend on runs (lua/README.md, "Dependencies"): what every script that ends
  or forgets a run does for the graph around it. Parents and children may live in other
  queues, so in other hash slots on a cluster: a script never writes another queue's
  keys. It leaves a message in its own queue's `outbox` (a ZSET: message -> ms it is
  due), which the forwarders (flo_redis/actions/graph.py) carry to the other queue's
  graph scripts, each applied idempotently. Messages, NUL-separated:
    e <run> <version> <status> [<batch>]   the run ended (its version counts its ends,
                                 `ge`); its batch, if any, is told too
    r <prefix> <first> <n> <parent> <policy>   new children (ids prefix .. first, ...,
                                 n of them) wait on a parent: register them there
    R <child>                    a new child waits on the parents packed in its 'P'
                                 field: write its states and register it on each, a
                                 page at a time
    q <group> <parent> <policy>  a new group (below) waits on a parent: register the
                                 group there, as one child
    w <group> <version>          apply the group's state to its members, a page at a time
                                 from the message's cursor (graph_resolve)
    G <group>                    tell the runs that wait for the group as a whole how its
                                 members stand (one standing message per group, due
                                 again at each member's end: graph_take, graph_done)
    b <prefix> <first> <n> <batch>   new runs are members of a batch (lib/batch.lua)
    f <run> <version> <status> <parents> <dependents> <batch> [<group>]   forget the
                                 run's graph entries (after its last end message is
                                 carried); a group's member leaves it, the last one
                                 forgets the group
  A run's record says what of the graph it holds: `gd` 1 when runs depend on it (then
  `ge` counts its ends), `dn` the parents it has, `dw` those not ended yet, `df` those of
  the fail policy that ended otherwise than completed, `fb` the parent whose end failed
  (or cancelled) it, `bt` the batch it is a member of.
  Groups: the runs of one invoke_many that wait for parents wait as one group, named
  "<prefix><first>+<n>" (its members prefix .. first, ..., n of them; no run has such an
  id). The group, not each member, has a state per parent ('d' <group> <parent>) and an
  index entry ('p' <group> <parent>), and is registered on each parent as one child, so
  a parent's end is one message and one state change for all of them. Its record ('g'
  <group> in `graph`, msgpack) counts as a run's does (`dn`, `dw`, `df`), names the
  parent that fails it (`fb`, how it ended `ft`), how many members are not forgotten
  (`a`) and counts its changes (`v`). A member's record names its group (`dg`) and the
  group's `dw` and `df` it last took in (`gw`, `gf`): its own `dw` and `df` count the
  group's and any of its own (a continuation's), so each change of the group reaches
  each member once, in pages (graph_resolve), and a member decides as any run does.
  A run may also wait for a group as a whole: an invoke whose parents name every run of
  one group under one policy names the group instead (flo_redis/actions/graph.py,
  whole_groups). The run counts it as its members (`dn`, `dw`) and holds one state for
  it ('<policy> g <ended> <bad> <changes> <status> <blamed>'). Each member's end is
  counted in the group's record (`ee` ended, `eb` ended otherwise than completed, `em`
  one of those and `es` how it ended, `eq` the changes; the member keeps the status
  counted, `gz`, and the change it made, `gs`), and once a run waits for the group
  (`gd`) its message 'G' tells every such run how the members stand: each counts the
  difference from what it was told last, as the members' own messages would.
  `k` names outbox, and nudge: the channel that wakes the queue's forwarders.
]]
--@include lib/record.lua
--@include lib/checked.lua
--@include lib/run.lua

-- Tell the runs that depend on `run_id` (`run`, at its end status, saved by the caller
-- after this) that it ended: a message for the forwarders, due now, and a nudge on the
-- queue's `nudge` channel, once per call (`k.nudged`), which only forwarders hear. A
-- member of a group counts its end in the group's record ("Groups": `ee`, `eb`, `em`,
-- `es`, `eq`; its own `gz`, `gs`), and once runs wait for the group as a whole (`gd`)
-- the group's one standing message ('G' <group>) tells them. That message is due 10 ms
-- after the end (GROUP_TELL_MS in flo_redis/actions/graph.py), or earlier where it was
-- due earlier, so the ends of a group's members in those 10 ms are told together; the
-- nudge goes out only when it was not due that soon already. A call that ends many runs
-- (lib/complete.lua) sets `k.groups`: each group is then read once and kept there, and
-- graph_ended(k, nil, nil, now) at the call's end saves and tells them.
local function graph_ended(k, run_id, run, now)
  local tell, nudge, counted = {}, false, nil
  if not run_id then
    counted, k.groups, k.group_ends = k.groups, nil, nil
  elseif run.gd or run.bt then
    local v = (run.ge or 0) + 1
    run.ge = v
    local member = 'e\0' .. run_id .. '\0' .. string.format('%d\0%d', v, run.s)
    tell[#tell + 1] = run.bt and (member .. '\0' .. run.bt) or member
  end
  local group = run_id and run.dg
  if group then
    if not k.graph then error('graph_ended: a group member ends where k names no graph') end
    local field, ok, grp = 'g\0' .. group, true, k.groups and k.groups[group]
    if not grp then
      ok, grp = pcall(cmsgpack.unpack, redis.call('HGET', k.graph, field) or '')
    end
    if ok and type(grp) == 'table' then
      local was, bad = run.gz, run.s ~= RUN_COMPLETED
      grp.ee = (tonumber(grp.ee) or 0) + (was and 0 or 1)
      grp.eb = (tonumber(grp.eb) or 0) + (bad and 1 or 0)
        - ((was and was ~= RUN_COMPLETED) and 1 or 0)
      if bad then
        grp.em, grp.es = run_id, run.s
      elseif grp.em == run_id then
        -- Another member that ended otherwise than completed, if any, is blamed now.
        grp.em, grp.es = nil, nil
        local prefix, first, n = string.match(group, '^(.*:)(%d+)%+(%d+)$')
        local ids = {}
        for i = 0, (grp.eb > 0 and prefix) and tonumber(n) - 1 or -1 do
          ids[#ids + 1] = string.format('%s%d', prefix, tonumber(first) + i)
        end
        local raws = #ids > 0 and redis.call('HMGET', k.runs, unpack(ids)) or {}
        for i, raw in ipairs(raws) do
          local fine, other = pcall(cmsgpack.unpack, raw or '')
          -- (one ended earlier in this call is saved at its end: its status is here)
          local gz = k.group_ends and k.group_ends[ids[i]] or (fine and type(other) == 'table'
            and other.gz)
          if gz and gz ~= RUN_COMPLETED and ids[i] ~= run_id then
            grp.em, grp.es = ids[i], gz
            break
          end
        end
      end
      grp.eq = (tonumber(grp.eq) or 0) + 1
      run.gz, run.gs = run.s, grp.eq
      if k.groups then
        k.groups[group] = grp
        k.group_ends[run_id] = run.s
      else
        counted = {[group] = grp}
      end
    end
  end
  for name, grp in pairs(counted or {}) do
    redis.call('HSET', k.graph, 'g\0' .. name, cmsgpack.pack(grp))
    if grp.gd and redis.call('ZADD', k.outbox, 'LT', 'CH', now + 10, 'G\0' .. name) == 1 then
      nudge = true
    end
  end
  for _, member in ipairs(tell) do redis.call('ZADD', k.outbox, now, member) end
  if (#tell > 0 or nudge) and not k.nudged then
    k.nudged = true
    redis.pcall('SPUBLISH', k.nudge, '1')
  end
end

-- Leave a message to forget the graph entries of the forgotten run `run_id` (its bytes
-- `raw`) once it holds any: those go in pages, bounded (graph_take). A record without
-- the msgpack bytes of the keys "gd" and "dn" (fixstr of 2) holds none.
local function graph_forget(k, run_id, raw, now)
  if not (string.find(raw, '\162gd', 1, true) or string.find(raw, '\162dn', 1, true)
      or string.find(raw, '\162bt', 1, true)) then
    return
  end
  local ok, run = pcall(cmsgpack.unpack, raw)
  if not ok or type(run) ~= 'table' then return end
  local member = 'f\0' .. run_id .. '\0' .. string.format('%d\0%d\0%d\0%d\0',
    tonumber(run.ge) or 0, tonumber(run.s) or 0, run.dn and 1 or 0, run.gd and 1 or 0)
    .. (type(run.bt) == 'string' and run.bt or '')
  if type(run.dg) == 'string' then member = member .. '\0' .. run.dg end
  redis.call('ZADD', k.outbox, now, member)
end

-- Call `cmd` on `key` with the values `args` (in pairs), a few thousand a call: Lua
-- unpacks at most about 8000 values onto its stack.
local function graph_bulk(cmd, key, args)
  for i = 1, #args, 6000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 5999, #args)))
  end
end

-- Make the `n` new runs id_prefix .. first, ... (each `run`, PENDING; not saved yet) wait
-- for their parents: `deps` a flat array of parent id, policy ('f' fail, 'i' ignore, 'r'
-- run anyway) of each, checked by the caller (graph_deps, `deps.packed` its msgpack).
-- Runs invoked together wait as one group ("Groups" above): its record and its state
-- per parent now, waiting ('w', version -1), and one message per parent asks the
-- parent's queue to register it ('q' group parent policy). A run invoked alone keeps its
-- parents packed ('P' field) and one message ('R' child) has the forwarders write its
-- states and register it a page at a time (graph_take), so even an invoke of 10,000
-- parents is a few writes. Saves the runs into `waiting`, a few calls for all.
local function graph_wait(k, id_prefix, first, n, run, deps, now)
  -- A parent that is a group (graph_deps) counts as its members, and its state counts
  -- their ends as the group tells them ("Groups").
  local parents, fresh = 0, {}
  for j = 1, #deps, 2 do
    local size = string.match(deps[j], '^.*:%d+%+(%d+)$')
    parents = parents + (tonumber(size) or 1)
    fresh[j] = deps[j + 1] .. (size and ' g 0 0 -1 0 ' or ' w -1')
  end
  run.dn, run.dw, run.df = parents, parents, 0
  local record, at = cmsgpack.pack(run), string.format('%d', now)
  redis.call('HSET', k.meta, 'graph', '1')
  if n == 1 then
    local run_id = string.format('%s%d', id_prefix, first)
    redis.call('HSET', k.runs, run_id, record)
    redis.call('ZADD', k.waiting, at, run_id)
    redis.call('HSET', k.graph, 'P\0' .. run_id, deps.packed)
    redis.call('ZADD', k.outbox, at, 'R\0' .. run_id)
    return
  end
  local group = string.format('%s%d+%d', id_prefix, first, n)
  run.dg, run.gw, run.gf = group, parents, 0
  record = cmsgpack.pack(run)
  local records, waiting, states, index, messages = {}, {}, {}, {}, {}
  for i = 0, n - 1 do
    local run_id = string.format('%s%d', id_prefix, first + i)
    records[2 * i + 1], records[2 * i + 2] = run_id, record
    waiting[2 * i + 1], waiting[2 * i + 2] = at, run_id
  end
  for j = 1, #deps, 2 do
    local pair = group .. '\0' .. deps[j]
    states[j], states[j + 1] = 'd\0' .. pair, fresh[j]
    index[j], index[j + 1] = 0, 'p\0' .. pair
    messages[j], messages[j + 1] = at, 'q\0' .. pair .. '\0' .. deps[j + 1]
  end
  graph_bulk('HSET', k.runs, records)
  graph_bulk('ZADD', k.waiting, waiting)
  redis.call('HSET', k.graph, 'g\0' .. group,
    cmsgpack.pack({dn = parents, dw = parents, df = 0, a = n, v = 0}))
  graph_bulk('HSET', k.graph, states)
  graph_bulk('ZADD', k.graph_idx, index)
  graph_bulk('ZADD', k.outbox, messages)
end

-- The parents `packed` names (ARGV: a msgpack array of parent id, policy of each), as a
-- flat array; nil unless each id is a string of 1 .. 512 bytes without NUL, each policy
-- 'f', 'i' or 'r', no parent is named twice, and there are 1 .. 10000.
local function graph_deps(packed)
  local deps = arg_array(packed, 20000)
  if not deps or #deps == 0 or #deps % 2 ~= 0 then return nil end
  local seen = {}
  for i = 1, #deps, 2 do
    local parent, policy = deps[i], deps[i + 1]
    if type(parent) ~= 'string' or #parent == 0 or #parent > 512 or seen[parent]
        or string.find(parent, '\0', 1, true) then
      return nil
    end
    if policy ~= 'f' and policy ~= 'i' and policy ~= 'r' then return nil end
    seen[parent] = true
  end
  deps.packed = packed
  return deps
end
