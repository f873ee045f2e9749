--[[ schedule_due
  Read an action's schedules in due order, with the server time: all of them, or only
  those due now. Read-only; at most `limit` schedules per call.
  KEYS[1] schedules     HASH  schedule name -> msgpack record
  KEYS[2] schedule_due  ZSET  schedule name -> next occurrence ms
  ARGV[1] limit     1..1000 schedules at most
  ARGV[2] only_due  1: only schedules due by server time, 0: all
  Returns {status, now_ms, next_ms, name, due_ms, record, name, due_ms, record, ...}
    status: OK; next_ms: the first occurrence after now of any of them (0: none), so a
    caller can come back exactly then
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/checked.lua
local k = {schedules = KEYS[1], schedule_due = KEYS[2]}
local limit = arg_int(ARGV[1], 1, 1000)
local only_due = arg_flag(ARGV[2])

if not limit then return {ST_BAD_ARG, 1} end
if only_due == nil then return {ST_BAD_ARG, 2} end

local now = now_ms()
local upto = '+inf'
if only_due then upto = now end
local rows = redis.call('ZRANGEBYSCORE', k.schedule_due, '-inf', upto, 'WITHSCORES',
  'LIMIT', 0, limit)
local after = redis.call('ZRANGEBYSCORE', k.schedule_due, '(' .. now, '+inf', 'WITHSCORES',
  'LIMIT', 0, 1)
local out = {ST_OK, now, tonumber(after[2]) or 0}
for i = 1, #rows, 2 do
  local record = redis.call('HGET', k.schedules, rows[i])
  if record then
    out[#out + 1] = rows[i]
    out[#out + 1] = tonumber(rows[i + 1])
    out[#out + 1] = record
  end
end
return out
