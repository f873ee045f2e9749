--[[ schedule_remove
  Remove a named schedule, active or paused, with the note of what it last did; runs it
  already created are untouched.
  KEYS[1] schedules        HASH  schedule name -> msgpack record
  KEYS[2] schedule_due     ZSET  schedule name -> next occurrence ms
  KEYS[3] schedule_paused  ZSET  schedule name -> the occurrence it holds while paused
  KEYS[4] schedule_last    HASH  schedule name -> msgpack note of the runs it created
  ARGV[1] name  schedule name
  Returns {status}   status: OK | NOT_FOUND
]]
--@include lib/status.lua
--@include lib/schedule.lua
local k = {schedules = KEYS[1], schedule_due = KEYS[2], schedule_paused = KEYS[3],
  schedule_last = KEYS[4]}
local name = ARGV[1]

if redis.call('HDEL', k.schedules, name) == 0 then return {ST_NOT_FOUND} end
schedule_drop(k, name)
return {ST_OK}
