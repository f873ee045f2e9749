--[[ graph_take
  Take the messages of a queue's outbox that are due (lib/graph.lua), for a forwarder to
  carry to the queues they are for: each one taken is due again `lease_ms` later, should
  its forwarder not finish it (graph_done), so a forwarder that dies delays a message and
  never loses it. A message to forget a run's graph entries concerns this queue alone: it
  is carried out here, a page at a time (after the run's last end message is gone), and
  not returned.
  KEYS[1] graph    HASH  dependency states, message cursors (lib/graph.lua)
  KEYS[2] graph_idx ZSET  dependency index, by name (lib/graph.lua)
  KEYS[3] outbox   ZSET  graph messages -> ms due (lib/graph.lua)
  ARGV[1] limit    at most this many messages (1 .. 1000)
  ARGV[2] page     at most this many children per ended run, and entries forgotten per
                   message (1 .. 1000)
  ARGV[3] lease_ms a message taken is due again after this many ms (1 .. 3600000)
  ARGV[4] ahead_ms messages due within this many ms are taken as well (0 .. 1000): a
                   group's 'G', due a few ms after its members' ends, by a caller that
                   carries everything there is now (client.action.forward, an invoke's
                   own forward, a stopping worker's last round)
  Returns {status, now_ms, next_due_ms, message * n}   status: OK; next_due_ms: when the
          earliest message left is due (-1: none); each message {member, 'r', prefix,
          first, n, parent, policy} (children prefix .. first, ..., n of them), {member,
          'q', group, parent, policy} (a group to register on the parent: lib/graph.lua),
          {member, 'w', group, version, cursor}: apply the group's state to its members
          from number `cursor` on (graph_resolve), or {member, 'G', group, changes,
          ended, bad, status, blamed, cursor, children}: how the group's members stand
          (`changes` counts their ends; `ended` have ended, `bad` of them otherwise than
          completed, `blamed` one of those, ending `status`), for the next page of
          `children`, the runs that wait for the group as a whole (`cursor` as for 'e',
          after the change it names), or
          {member, 'R', child, cursor, parents}: register the child on the next
          page of its parents (`cursor` as for 'e'), or
          {member, 'e', run, version, status, cursor, children, batch}: the run ended,
          `children`
          the next page of those that depend on it, `cursor` to pass to graph_done
          ('' when this page is the last), `batch` the batch to tell of the end ('' for
          none, or after the first page); or {member, 'b', prefix, first, n, batch}: the
          runs prefix .. first, ... (n of them) are members of `batch`
]]
--@include lib/status.lua
--@include lib/graph_index.lua
--@include lib/clock.lua
--@include lib/checked.lua
--@include lib/graph_group.lua
local k = {graph = KEYS[1], graph_idx = KEYS[2], outbox = KEYS[3]}
local limit = arg_int(ARGV[1], 1, 1000)
local page = arg_int(ARGV[2], 1, 1000)
local lease_ms = arg_int(ARGV[3], 1, 3600000)
if not limit then return {ST_BAD_ARG, 1} end
if not page then return {ST_BAD_ARG, 2} end
if not lease_ms then return {ST_BAD_ARG, 3} end
local ahead_ms = arg_int(ARGV[4], 0, 1000)
if not ahead_ms then return {ST_BAD_ARG, 4} end

local now = now_ms()
local members = redis.call('ZRANGE', k.outbox, '-inf', now + ahead_ms, 'BYSCORE',
  'LIMIT', 0, limit)

-- The next `n` entries of the index after `from` (exclusive) that start with `prefix`.
local function index_page(prefix, from, n)
  return graph_index_page(k.graph_idx, prefix, from, n)
end

-- Forget a page of the graph entries of run `run` (its parents when `parents` is '1',
-- those depending on it when `dependents` is); true once none is left.
local function forget(run, parents, dependents)
  local left = page
  if parents == '1' then
    -- Its registration, if not carried yet, goes with it.
    redis.call('ZREM', k.outbox, 'R\0' .. run)
    redis.call('HDEL', k.graph, 'P\0' .. run, 'c\0R\0' .. run)
    local prefix = 'p\0' .. run .. '\0'
    local entries = index_page(prefix, nil, left)
    if #entries > 0 then
      local states = {}
      for i, entry in ipairs(entries) do
        states[i] = 'd\0' .. string.sub(entry, 3)
      end
      redis.call('ZREM', k.graph_idx, unpack(entries))
      redis.call('HDEL', k.graph, unpack(states))
      left = left - #entries
    end
    if left == 0 then return false end
  end
  if dependents == '1' then
    local entries = index_page('k\0' .. run .. '\0', nil, left)
    if #entries > 0 then redis.call('ZREM', k.graph_idx, unpack(entries)) end
    if #entries == left then return false end
  end
  return true
end

-- A member of `group` is forgotten: the group counts it; after its last member the
-- group's own entries go, a page at a time, as a forgotten run's parents do.
local function leave_group(group)
  local field = 'g\0' .. group
  local grp = graph_group_load(k.graph, group)
  if not grp or type(grp.a) ~= 'number' then return end
  grp.a = grp.a - 1
  if grp.a > 0 then
    redis.call('HSET', k.graph, field, cmsgpack.pack(grp))
  else
    redis.call('ZREM', k.outbox, 'G\0' .. group)
    redis.call('HDEL', k.graph, 'c\0G\0' .. group)
    if forget(group, '1', '1') then
      redis.call('HDEL', k.graph, field)
    else  -- more than a page of entries: the rest go as a forgotten run's do
      redis.call('ZADD', k.outbox, now, 'f\0' .. group .. '\0000\0000\0001\0001\0')
    end
  end
end

local out = {ST_OK, now, -1}
local leased, due = {}, string.format('%d', now + lease_ms)
local function lease(member)
  leased[#leased + 1] = due
  leased[#leased + 1] = member
end
for _, member in ipairs(members) do
  local kind = string.sub(member, 1, 1)
  local parts = {}
  for part in string.gmatch(string.sub(member, 3) .. '\0', '([^%z]*)%z') do
    parts[#parts + 1] = part
  end
  if kind == 'f' then
    local run, version, status = parts[1], parts[2], parts[3]
    local ended = 'e\0' .. run .. '\0' .. version .. '\0' .. status
    if (parts[6] or '') ~= '' then ended = ended .. '\0' .. parts[6] end
    local group = parts[7] or ''
    if redis.call('ZSCORE', k.outbox, ended)
        or (group ~= '' and redis.call('ZSCORE', k.outbox, 'G\0' .. group)) then
      lease(member)  -- its end is not told yet (or not its group's)
    elseif forget(run, parts[4], parts[5]) then
      redis.call('ZREM', k.outbox, member)
      if group ~= '' then leave_group(group) end
      if graph_group_of(run) then redis.call('HDEL', k.graph, 'g\0' .. run) end
    end
  elseif kind == 'q' then
    lease(member)
    out[#out + 1] = {member, 'q', parts[1], parts[2], parts[3]}
  elseif kind == 'w' then
    lease(member)
    local cursor = redis.call('HGET', k.graph, 'c\0' .. member) or '0'
    out[#out + 1] = {member, 'w', parts[1], parts[2], cursor}
  elseif kind == 'r' then
    lease(member)
    out[#out + 1] = {member, 'r', parts[1], parts[2], parts[3], parts[4], parts[5]}
  elseif kind == 'R' then
    -- The child's next page of parents (from its packed list, after the cursor: how many
    -- came before), each state written now unless it was (a page taken again).
    local child = parts[1]
    local done_n = tonumber(redis.call('HGET', k.graph, 'c\0' .. member)) or 0
    local packed = redis.call('HGET', k.graph, 'P\0' .. child)
    local ok, deps = pcall(cmsgpack.unpack, packed or '')
    local last = ok and type(deps) == 'table' and math.min(#deps, 2 * (done_n + page)) or 0
    if last <= 2 * done_n then
      redis.call('ZREM', k.outbox, member)
      redis.call('HDEL', k.graph, 'c\0' .. member, 'P\0' .. child)
    else
      local parents, index = {}, {}
      for i = 2 * done_n + 1, last, 2 do
        local pair = child .. '\0' .. deps[i]
        local fresh = graph_group_of(deps[i]) and ' g 0 0 -1 0 ' or ' w -1'
        redis.call('HSETNX', k.graph, 'd\0' .. pair, deps[i + 1] .. fresh)
        parents[#parents + 1] = deps[i]
        index[#index + 1] = 0
        index[#index + 1] = 'p\0' .. pair
      end
      redis.call('ZADD', k.graph_idx, unpack(index))
      lease(member)
      local next_cursor = last < #deps and string.format('%d', last / 2) or ''
      out[#out + 1] = {member, 'R', child, next_cursor, parents}
    end
  elseif kind == 'G' then
    local group = parts[1]
    local grp = graph_group_load(k.graph, group)
    if not grp then
      redis.call('ZREM', k.outbox, member)
      redis.call('HDEL', k.graph, 'c\0' .. member)
    else
      -- The page after the cursor, if it was left by a page of this same change; a
      -- newer change is told to every child from the first.
      local changes = string.format('%d', tonumber(grp.eq) or 0)
      local at = redis.call('HGET', k.graph, 'c\0' .. member) or ''
      local from = string.match(at, '^' .. changes .. '%z(.+)$')
      local prefix = 'k\0' .. group .. '\0'
      local entries = index_page(prefix, from, page)
      local children = {}
      for i, entry in ipairs(entries) do
        children[i] = string.match(string.sub(entry, #prefix + 1), '^(.*)%z%d+$') or ''
      end
      local next_cursor = #entries == page and string.sub(entries[#entries], #prefix + 1) or ''
      lease(member)
      out[#out + 1] = {member, 'G', group, changes, tonumber(grp.ee) or 0,
        tonumber(grp.eb) or 0, tonumber(grp.es) or 0, grp.em or '', next_cursor, children}
    end
  elseif kind == 'b' then
    lease(member)
    out[#out + 1] = {member, 'b', parts[1], parts[2], parts[3], parts[4]}
  elseif kind == 'e' then
    local run = parts[1]
    local cursor = redis.call('HGET', k.graph, 'c\0' .. member) or nil
    local entries = index_page('k\0' .. run .. '\0', cursor, page)
    -- Its batch is told with the first page (or alone), not again with the next pages.
    local batch = not cursor and parts[4] or ''
    if #entries == 0 and batch == '' then
      redis.call('ZREM', k.outbox, member)
      redis.call('HDEL', k.graph, 'c\0' .. member)
    else
      -- Only children registered before this end ("<child> <ends>", ends below its
      -- version): one registered since was told of it, or of a later state, then.
      local skip, version, children = #run + 3, tonumber(parts[2]), {}
      for _, entry in ipairs(entries) do
        local child, since = string.match(string.sub(entry, skip + 1), '^(.*)%z(%d+)$')
        if child and tonumber(since) < version then children[#children + 1] = child end
      end
      local next_cursor = #entries == page and string.sub(entries[#entries], skip + 1) or ''
      lease(member)
      out[#out + 1] = {member, 'e', run, parts[2], parts[3], next_cursor, children, batch}
    end
  else
    redis.call('ZREM', k.outbox, member)  -- no message of this version: dropped
  end
end
if #leased > 0 then redis.call('ZADD', k.outbox, unpack(leased)) end
local first = redis.call('ZRANGE', k.outbox, 0, 0, 'WITHSCORES')
if #first > 0 then out[3] = tonumber(first[2]) end
return out
