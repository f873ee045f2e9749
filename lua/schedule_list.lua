--[[ schedule_list
  Read an action's schedules as an operator sees them, with the server time: the active
  ones in due order, then the paused ones, each with its record and the note of what it
  last did; or the one schedule `name`. Read-only; at most `limit` schedules per call.
  KEYS[1] schedules        HASH  schedule name -> msgpack record
  KEYS[2] schedule_due     ZSET  schedule name -> next occurrence ms (active schedules)
  KEYS[3] schedule_paused  ZSET  schedule name -> the occurrence it holds (paused ones)
  KEYS[4] schedule_last    HASH  schedule name -> msgpack note {o, r, a, t, u}
  ARGV[1] limit  1..1000 schedules at most
  ARGV[2] name   one schedule's name, or '' for all of them
  Returns {status, now_ms, name, next_ms, paused, record, note, ...}   status: OK;
    paused 1/0; note: the msgpack note, or '' when it has none
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/checked.lua
local k = {schedules = KEYS[1], schedule_due = KEYS[2], schedule_paused = KEYS[3],
  schedule_last = KEYS[4]}
local limit = arg_int(ARGV[1], 1, 1000)
local name = ARGV[2]

if not limit then return {ST_BAD_ARG, 1} end

local out = {ST_OK, now_ms()}
local function add(found, at, paused)
  local record = redis.call('HGET', k.schedules, found)
  if not record then return end
  out[#out + 1] = found
  out[#out + 1] = tonumber(at)
  out[#out + 1] = paused
  out[#out + 1] = record
  out[#out + 1] = redis.call('HGET', k.schedule_last, found) or ''
end

if name ~= '' then
  local due = redis.call('ZSCORE', k.schedule_due, name)
  if due then
    add(name, due, 0)
  else
    local held = redis.call('ZSCORE', k.schedule_paused, name)
    if held then add(name, held, 1) end
  end
  return out
end
local active = redis.call('ZRANGE', k.schedule_due, 0, limit - 1, 'WITHSCORES')
for i = 1, #active, 2 do add(active[i], active[i + 1], 0) end
local left = limit - #active / 2
if left > 0 then
  local paused = redis.call('ZRANGE', k.schedule_paused, 0, left - 1, 'WITHSCORES')
  for i = 1, #paused, 2 do add(paused[i], paused[i + 1], 1) end
end
return out
