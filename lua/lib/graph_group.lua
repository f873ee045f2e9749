--[[ lib/graph_group
  What only the graph scripts use (lib/graph.lua): a group's name and record read, and
  run records read once per call. Apart from lib/graph.lua, which every script that ends
  a run includes, so that those scripts do not define them.
]]
--@include lib/run.lua

-- The group `group` (lib/graph.lua, "Groups") as its members' prefix, first number and
-- count; nil for a name that is not a group's.
local function graph_group_of(group)
  local prefix, first, n = string.match(group, '^(.*:)(%d+)%+(%d+)$')
  if not prefix then return nil end
  return prefix, tonumber(first), tonumber(n)
end

-- The record of the group `group` in the hash `graph` (a table; false when it has none,
-- or its bytes do not decode to one).
local function graph_group_load(graph, group)
  local ok, grp = pcall(cmsgpack.unpack, redis.call('HGET', graph, 'g\0' .. group) or '')
  return ok and type(grp) == 'table' and grp
end

-- The record of `run_id`, read once per call into `cache` (run id -> record; false: no
-- such run, or its record was set aside: run_aside, so `k` names what it does).
local function run_load_once(k, cache, run_id)
  local run = cache[run_id]
  if run == nil then
    local why, raw
    run, why, raw = run_load(k.runs, run_id)
    if run == false then run_aside(k, run_id, raw, why) end
    run = run or false
    cache[run_id] = run
  end
  return run
end

-- The records of the runs `ids` not in `cache` yet, read with one HMGET a thousand and
-- decoded together (run_decode_all) into `cache`, as run_load_once would one at a time.
local function run_load_many(k, cache, ids)
  local wanted = {}
  for _, run_id in ipairs(ids) do
    if cache[run_id] == nil then
      cache[run_id] = false  -- (set below; also marks one named twice)
      wanted[#wanted + 1] = run_id
    end
  end
  for at = 1, #wanted, 1000 do
    local part = {unpack(wanted, at, math.min(at + 999, #wanted))}
    local raws = redis.call('HMGET', k.runs, unpack(part))
    local runs, whys = run_decode_all(raws)
    for i, run_id in ipairs(part) do
      if runs[i] == false and raws[i] then run_aside(k, run_id, raws[i], whys[i]) end
      cache[run_id] = runs[i] or false
    end
  end
end
