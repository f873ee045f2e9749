--[[ lib/graph_group
  What only the graph scripts use (lib/graph.lua): a group's name read, and run records
  read once per call. Apart from lib/graph.lua, which every script that ends a run
  includes, so that those scripts do not define them.
]]
--@include lib/run.lua

-- The group `group` (lib/graph.lua, "Groups") as its members' prefix, first number and
-- count; nil for a name that is not a group's.
local function graph_group_of(group)
  local prefix, first, n = string.match(group, '^(.*:)(%d+)%+(%d+)$')
  if not prefix then return nil end
  return prefix, tonumber(first), tonumber(n)
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
