--[[ batch_note
  Tell a batch of its members (lib/batch.lua): one added (state -2), or how one ended
  (its status, and its version: a run's ends so far, a nested batch's outcomes). A
  version not newer than the member's changes nothing, so a message carried twice, or
  late, is harmless; a member told of before it was added is counted all the same. The
  first member to fail for good (FAILED or TIMED_OUT) leaves the death callback; a sealed
  batch whose members have all ended settles (lib/batch.lua, batch_settle).
  KEYS[1] state    HASH  the batch's counts and settings (lib/batch.lua)
  KEYS[2] members  HASH  member -> "<state> <version>" (lib/batch.lua)
  KEYS[3] outbox   ZSET  the batch's messages -> ms due (lib/batch.lua)
  ARGV[1] items    msgpack array: member, state (-2 added, else a run status), version of
                   each (at most 1000 members)
  Returns {status}   OK | NOT_FOUND (no such batch: nothing written)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/checked.lua
--@include lib/batch.lua
local k = {state = KEYS[1], members = KEYS[2], outbox = KEYS[3]}
local items = arg_array(ARGV[1], 3000)
if not items or #items % 3 ~= 0 then return {ST_BAD_ARG, 1} end
for i = 1, #items, 3 do
  if type(items[i]) ~= 'string' or type(items[i + 1]) ~= 'number'
      or type(items[i + 2]) ~= 'number' then
    return {ST_BAD_ARG, 1}
  end
end
if redis.call('EXISTS', k.state) == 0 then return {ST_NOT_FOUND} end
local now = now_ms()
local COMPLETED, FAILED, TIMED_OUT = 2, 3, 5
local dn, dc, df = 0, 0, 0
for i = 1, #items, 3 do
  local member, told, version = items[i], items[i + 1], items[i + 2]
  local was = redis.call('HGET', k.members, member)
  local state, seen = 'w', -1
  if was then
    local s, v = string.match(was, '^(%-?%w+) (%-?%d+)$')
    state, seen = s, tonumber(v)
  else
    dn = dn + 1
  end
  if told ~= -2 and version > seen then
    if state == tostring(COMPLETED) then dc = dc - 1 elseif state ~= 'w' then df = df - 1 end
    if told == COMPLETED then dc = dc + 1 else df = df + 1 end
    redis.call('HSET', k.members, member, told .. ' ' .. version)
    if (told == FAILED or told == TIMED_OUT)
        and redis.call('HSETNX', k.state, 'cb:death', '1') == 1 then
      redis.call('ZADD', k.outbox, now, 'c\0death')
    end
  elseif not was then
    redis.call('HSET', k.members, member, 'w -1')
  end
end
if dn ~= 0 then redis.call('HINCRBY', k.state, 'n', dn) end
if dc ~= 0 then redis.call('HINCRBY', k.state, 'c', dc) end
if df ~= 0 then redis.call('HINCRBY', k.state, 'f', df) end
batch_settle(k, now)
return {ST_OK}
