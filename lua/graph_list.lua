--[[ graph_list
  A page of a run's graph, in its queue (lib/graph.lua): its parents, each with its
  policy and what the run was told of it, or the runs that depend on it, by id.
  KEYS[1] graph    HASH  dependency states (lib/graph.lua)
  KEYS[2] graph_idx ZSET  dependency index, by name (lib/graph.lua)
  ARGV[1] kind     parents | dependents
  ARGV[2] run_id
  ARGV[3] after    the cursor the page before answered ('' from the first)
  ARGV[4] count    at most this many (1 .. 1000)
  Returns {status, after, entries...}   status: OK; after: the cursor of the next page
          ('' when this one was the last, or may be); for
          parents each entry is {parent, policy, state ('w' waiting, else the status
          it ended with, -1 not found), version}; for dependents, each a child's id
]]
--@include lib/status.lua
--@include lib/graph_index.lua
--@include lib/checked.lua
local k = {graph = KEYS[1], graph_idx = KEYS[2]}
local kind = ARGV[1]
local run_id = ARGV[2]
local after = ARGV[3]
local count = arg_int(ARGV[4], 1, 1000)
if kind ~= 'parents' and kind ~= 'dependents' then return {ST_BAD_ARG, 1} end
if not count then return {ST_BAD_ARG, 4} end
local prefix = (kind == 'parents' and 'p\0' or 'k\0') .. run_id .. '\0'
local entries = graph_index_page(k.graph_idx, prefix, after ~= '' and after or nil, count)
local skip = #prefix
local out = {ST_OK, #entries == count and string.sub(entries[#entries], skip + 1) or ''}
for _, entry in ipairs(entries) do
  local id = string.sub(entry, skip + 1)
  if kind == 'dependents' then
    out[#out + 1] = string.match(id, '^(.*)%z%d+$') or id  -- "<child> <parent's ends>"
  else
    local state = redis.call('HGET', k.graph, 'd\0' .. run_id .. '\0' .. id) or ''
    local policy, told, version = string.match(state, '^(%a) (%-?%w+) (%-?%d+)$')
    out[#out + 1] = {id, policy or '', told or '', tonumber(version) or -1}
  end
end
return out
