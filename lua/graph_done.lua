--[[ graph_done
  A forwarder is done with messages it took (graph_take): one carried in full leaves the
  outbox; one of which a page was carried keeps its cursor and is due again at once, for
  the next page. A cursor never moves back (a forwarder whose lease ran out may report a
  page another has carried since). A group's message ('G') is carried in full only if
  the group has not changed since it was taken (its cursor "<changes>\0<page>" says
  which change it told): else it is due again 10 ms on (as a member's end makes it:
  lib/graph.lua), to tell the newer one with the ends of those 10 ms; its next page of
  runs, at once.
  KEYS[1] graph    HASH  dependency states, message cursors (lib/graph.lua)
  KEYS[2] outbox   ZSET  graph messages -> ms due (lib/graph.lua)
  ARGV[1] items    msgpack array: message, cursor of each ('' once carried in full), at
                   most 1000 messages
  Returns {status}   OK
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/checked.lua
--@include lib/graph_group.lua
local k = {graph = KEYS[1], outbox = KEYS[2]}
local items = arg_array(ARGV[1], 2000)
if not items or #items % 2 ~= 0 then return {ST_BAD_ARG, 1} end
for i = 1, #items do
  if type(items[i]) ~= 'string' then return {ST_BAD_ARG, 1} end
end
-- A changed group's message is due again this many ms on (its members' ends in that time
-- told together: lib/graph.lua, where a member's end makes it due as far on).
local GROUP_TELL_MS = 10
local now = now_ms()
local carried = {}
for i = 1, #items, 2 do
  local member, cursor = items[i], items[i + 1]
  local field, kind = 'c\0' .. member, string.byte(member, 1)
  if kind == 71 then  -- 'G'
    local told, page = string.match(cursor, '^(%d+)%z(.*)$')
    page = page or ''
    local grp = graph_group_load(k.graph, string.sub(member, 3))
    local changes = grp and string.format('%d', tonumber(grp.eq) or 0)
    if not changes or (page == '' and told == changes) then
      carried[#carried + 1] = member
      redis.call('HDEL', k.graph, field)
    elseif redis.call('ZSCORE', k.outbox, member) then
      local at = redis.call('HGET', k.graph, field) or ''
      local at_told, at_page = string.match(at, '^(%d+)%z(.*)$')
      local due = now
      if page == '' then
        redis.call('HDEL', k.graph, field)
        due = now + GROUP_TELL_MS
      elseif not (at_told == told and (at_page or '') >= page) then
        redis.call('HSET', k.graph, field, cursor)
      end
      redis.call('ZADD', k.outbox, due, member)
    end
  elseif cursor == '' then
    carried[#carried + 1] = member
    if kind == 101 or kind == 119 then redis.call('HDEL', k.graph, field) end  -- 'e', 'w'
    if kind == 82 then redis.call('HDEL', k.graph, field, 'P' .. string.sub(member, 2)) end
  elseif redis.call('ZSCORE', k.outbox, member) then
    local at = redis.call('HGET', k.graph, field)
    -- An 'R' cursor counts parents and a 'w' one members (numbers), an 'e' one is a
    -- child's id.
    local counts = kind == 82 or kind == 119
    local behind = not at or (counts and (tonumber(at) or 0) < (tonumber(cursor) or 0))
      or (not counts and at < cursor)
    if behind then redis.call('HSET', k.graph, field, cursor) end
    redis.call('ZADD', k.outbox, now, member)
  end
end
if #carried > 0 then redis.call('ZREM', k.outbox, unpack(carried)) end
return {ST_OK}
