--[[ schedule_resume
  Resume a paused schedule at the occurrence it held when paused. Occurrences that passed
  while it was paused are missed ones: its `missed` policy decides what they fire (once:
  the oldest, once, late, then on to the next after now; all: each, once). Resuming an
  active schedule changes nothing. A schedule is in exactly one of the two sets while it
  exists (lib/schedule.lua).
  KEYS[1] schedule_due     ZSET  schedule name -> next occurrence ms (active schedules)
  KEYS[2] schedule_paused  ZSET  schedule name -> the occurrence it holds (paused ones)
  ARGV[1] name  schedule name
  Returns {status, changed, next_ms}   status: OK | NOT_FOUND (no such schedule);
    changed: 1 resumed now, 0 it was not paused; next_ms: its next occurrence
]]
--@include lib/status.lua
local k = {schedule_due = KEYS[1], schedule_paused = KEYS[2]}
local name = ARGV[1]

local due = redis.call('ZSCORE', k.schedule_due, name)
if due then return {ST_OK, 0, tonumber(due)} end
local held = redis.call('ZSCORE', k.schedule_paused, name)
if not held then return {ST_NOT_FOUND} end
redis.call('ZREM', k.schedule_paused, name)
redis.call('ZADD', k.schedule_due, held, name)
return {ST_OK, 1, tonumber(held)}
