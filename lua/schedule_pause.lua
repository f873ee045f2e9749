--[[ schedule_pause
  Pause a schedule: it leaves the due schedules and creates no run until resumed, holding
  the next occurrence it had (schedule_resume puts it back there, and the schedule's
  `missed` policy decides what the occurrences passed meanwhile fire). Pausing a paused
  schedule changes nothing. A schedule is in exactly one of the two sets while it
  exists (lib/schedule.lua).
  KEYS[1] schedule_due     ZSET  schedule name -> next occurrence ms (active schedules)
  KEYS[2] schedule_paused  ZSET  schedule name -> the occurrence it holds (paused ones)
  ARGV[1] name  schedule name
  Returns {status, changed, next_ms}   status: OK | NOT_FOUND (no such schedule);
    changed: 1 paused now, 0 it was paused already; next_ms: the occurrence it holds
]]
--@include lib/status.lua
local k = {schedule_due = KEYS[1], schedule_paused = KEYS[2]}
local name = ARGV[1]

local held = redis.call('ZSCORE', k.schedule_paused, name)
if held then return {ST_OK, 0, tonumber(held)} end
local due = redis.call('ZSCORE', k.schedule_due, name)
if not due then return {ST_NOT_FOUND} end
redis.call('ZREM', k.schedule_due, name)
redis.call('ZADD', k.schedule_paused, due, name)
return {ST_OK, 1, tonumber(due)}
