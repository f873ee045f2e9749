--[[ graph_depend
  Register children on their parents, in the parents' queue (lib/graph.lua: a message
  'r' carried here): each child is indexed under its parent with the parent's ends so
  far ("k <parent> <child> <ends>"), and is told of every later end (`gd`). A parent that
  has ended already answers how, so the forwarder tells the child at once. Registering
  twice changes nothing. A parent may be a group of runs invoked together (lib/graph.lua,
  "Groups"): the child is indexed under the group, which counts its members' ends from
  then on (`gd`), and the group's message ('G') tells it how they stand.
  KEYS[1] meta     HASH  counters
  KEYS[2] runs     HASH  run_id -> msgpack record
  KEYS[3] graph_idx ZSET  dependency index, by name (lib/graph.lua)
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[6] pending  ZSET  run_id -> queue order
  KEYS[7] delayed  ZSET  run_id -> due ms
  KEYS[8] leases   ZSET  run_id -> lease deadline ms
  KEYS[9] done     ZSET  run_id -> finished ms
  KEYS[10] failed  ZSET  run_id -> finished ms
  KEYS[11] waiting ZSET  run_id -> created ms: runs waiting for their parents
  KEYS[12] graph   HASH  dependency states, groups' records (lib/graph.lua)
  KEYS[13] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  KEYS[14] nudge   CHANNEL  sharded channel telling forwarders the outbox has a message (lib/graph.lua)
  ARGV[1] items    msgpack array: parent run id, child run id of each (at most 1000
                   pairs; ids of 1 .. 512 bytes without NUL)
  Returns {status, aside, (state, version) * n}   status: OK; aside: kind, field, why of
          each record set aside (a parent whose record does not decode); state per pair:
          -1 no such parent (or set aside), -2 not ended yet, else the status it ended
          with; version its ends so far (lib/graph.lua, `ge`); a group answers -2
]]
--@include lib/status.lua
--@include lib/graph_index.lua
--@include lib/checked.lua
--@include lib/run.lua
--@include lib/graph_group.lua
local k = {meta = KEYS[1], runs = KEYS[2], graph_idx = KEYS[3], inputs = KEYS[4],
  quarantine = KEYS[5], pending = KEYS[6], delayed = KEYS[7], leases = KEYS[8],
  done = KEYS[9], failed = KEYS[10], waiting = KEYS[11], graph = KEYS[12], outbox = KEYS[13],
  nudge = KEYS[14], aside = {}}
local items = arg_array(ARGV[1], 2000)
if not items or #items % 2 ~= 0 then return {ST_BAD_ARG, 1} end
for i = 1, #items do
  local id = items[i]
  if type(id) ~= 'string' or #id == 0 or #id > 512 or string.find(id, '\0', 1, true) then
    return {ST_BAD_ARG, 1}
  end
end
local out = {ST_OK, k.aside}
local loaded, index, nudge = {}, {}, false
for i = 1, #items, 2 do
  local parent, child = items[i], items[i + 1]
  local run
  if graph_group_of(parent) then
    local field = 'g\0' .. parent
    run = graph_group_load(k.graph, parent)
    if run then
      -- Told by the group's message, due now, not here; as a change of its own, so that
      -- a forwarder carrying the message taken before this (without this child) leaves
      -- it due again (graph_done).
      run.gd, run.eq = 1, (tonumber(run.eq) or 0) + 1
      redis.call('HSET', k.graph, field, cmsgpack.pack(run))
      redis.call('ZADD', k.outbox, 0, 'G\0' .. parent)
      nudge = true
      run.s, run.ge = RUN_PENDING, run.eq
    end
  else
    run = run_load_once(k, loaded, parent)
  end
  if not run then
    out[#out + 1] = -1
    out[#out + 1] = 0
  else
    -- Indexed with the parent's ends so far: an end message of those never reaches it
    -- (graph_take), as the state answered here tells it of the last one.
    -- A parent without `gd` has no child indexed yet, so none to look for.
    local entry = 'k\0' .. parent .. '\0' .. child .. '\0'
    if not run.gd or #graph_index_page(k.graph_idx, entry, nil, 1) == 0 then
      index[#index + 1] = 0
      index[#index + 1] = entry .. string.format('%d', run.ge or 0)
    end
    if not run.gd then
      run.gd = 1
      record_save(k.runs, parent, run)
    end
    local s = run.s
    if s == RUN_PENDING or s == RUN_RUNNING then
      out[#out + 1] = -2
    else
      out[#out + 1] = s
    end
    out[#out + 1] = run.ge or 0
  end
end
if nudge then redis.pcall('SPUBLISH', k.nudge, '1') end
if #index > 0 then
  redis.call('ZADD', k.graph_idx, unpack(index))
  redis.call('HSET', k.meta, 'graph', '1')
end
return out
