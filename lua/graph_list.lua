--[[ graph_list
  A page of a run's graph, in its queue (lib/graph.lua): its parents, each with its
  policy and what the run was told of it, or the runs that depend on it. Parents come in
  id order; a run of a group (lib/graph.lua, "Groups") has the group's parents as its
  own, and any it waits for itself. Dependents come in the order of the index: the runs
  of a group that depends on the run, together and in the order they were invoked, in
  the group's place.
  KEYS[1] graph    HASH  dependency states (lib/graph.lua)
  KEYS[2] graph_idx ZSET  dependency index, by name (lib/graph.lua)
  KEYS[3] runs     HASH  run_id -> msgpack record
  ARGV[1] kind     parents | dependents
  ARGV[2] run_id
  ARGV[3] after    the cursor the page before answered ('' from the first)
  ARGV[4] count    at most this many (1 .. 1000)
  Returns {status, after, entries...}   status: OK; after: the cursor of the next page
          ('' when this one was the last, or may be); for
          parents each entry is {parent, policy, state ('w' waiting, else the status
          it ended with, -1 not found; 'g' a group it waits for as a whole, and then
          version is how many of its members' ends it was told), version}; for
          dependents, each a child's id
]]
--@include lib/status.lua
--@include lib/graph_index.lua
--@include lib/checked.lua
--@include lib/graph_group.lua
local k = {graph = KEYS[1], graph_idx = KEYS[2], runs = KEYS[3]}
local kind = ARGV[1]
local run_id = ARGV[2]
local after = ARGV[3]
local count = arg_int(ARGV[4], 1, 1000)
if kind ~= 'parents' and kind ~= 'dependents' then return {ST_BAD_ARG, 1} end
if not count then return {ST_BAD_ARG, 4} end

if kind == 'parents' then
  -- Its own parents and its group's, each a page after `after`, merged by id.
  local owners = {run_id}
  local raw = redis.call('HGET', k.runs, run_id)
  if raw and string.find(raw, '\162dg', 1, true) then
    local ok, run = pcall(cmsgpack.unpack, raw)
    if ok and type(run) == 'table' and type(run.dg) == 'string' then owners[2] = run.dg end
  end
  local found = {}
  for _, owner in ipairs(owners) do
    local prefix = 'p\0' .. owner .. '\0'
    for _, entry in ipairs(graph_index_page(k.graph_idx, prefix, after ~= '' and after or nil,
        count)) do
      found[#found + 1] = {string.sub(entry, #prefix + 1), owner}
    end
  end
  table.sort(found, function(a, b) return a[1] < b[1] end)
  local out = {ST_OK, ''}
  for i = 1, math.min(count, #found) do
    local parent, owner = found[i][1], found[i][2]
    local state = redis.call('HGET', k.graph, 'd\0' .. owner .. '\0' .. parent) or ''
    local policy, told, version = string.match(state, '^(%a) (%-?%w+) (%-?%d+)$')
    if not policy then  -- a group it waits for as a whole: 'g' and the changes told
      policy, version = string.match(state, '^(%a) g %d+ %d+ (%-?%d+) ')
      told = policy and 'g'
    end
    out[#out + 1] = {parent, policy or '', told or '', tonumber(version) or -1}
  end
  if #found >= count then out[2] = found[count][1] end
  return out
end

-- Dependents. A cursor is the rest of the last index entry read ("<child>\0<ends>"), and
-- within a group also the number of its members listed ("<group>\0<ends>\0<i>").
local prefix = 'k\0' .. run_id .. '\0'
local skip = #prefix
local out = {ST_OK, ''}
local left = count

-- List the members of `group` from number `from` on while the page has room; the cursor
-- when it fills first ('' when every one was listed).
local function members(group, entry_rest, from)
  local member_prefix, first, n = graph_group_of(group)
  if not member_prefix then return '' end
  for i = from, n - 1 do
    if left == 0 then return entry_rest .. '\0' .. string.format('%d', i) end
    out[#out + 1] = string.format('%s%d', member_prefix, first + i)
    left = left - 1
  end
  return ''
end

local from = after ~= '' and after or nil
if from then
  local rest, at = string.match(from, '^(.*%z%d+)%z(%d+)$')
  if rest then  -- a page that ended within a group: the rest of it first
    from = rest
    local cursor = members(string.match(rest, '^(.*)%z%d+$'), rest, tonumber(at))
    if cursor ~= '' then
      out[2] = cursor
      return out
    end
  end
end
while left > 0 do
  local want = left
  local entries = graph_index_page(k.graph_idx, prefix, from, want)
  for _, entry in ipairs(entries) do
    if left == 0 then  -- a group filled the page: this entry begins the next
      out[2] = from
      return out
    end
    local rest = string.sub(entry, skip + 1)
    local child = string.match(rest, '^(.*)%z%d+$') or rest  -- "<child> <parent's ends>"
    if graph_group_of(child) then
      local cursor = members(child, rest, 0)
      if cursor ~= '' then
        out[2] = cursor
        return out
      end
    else
      out[#out + 1] = child
      left = left - 1
    end
    from = rest
  end
  if #entries < want then return out end
end
out[2] = from
return out
