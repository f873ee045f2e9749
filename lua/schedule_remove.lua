--[[ schedule_remove
  Remove a named schedule; runs it already fired are untouched.
  KEYS[1] schedules     HASH  schedule name -> msgpack record
  KEYS[2] schedule_due  ZSET  schedule name -> next occurrence ms
  ARGV[1] name  schedule name
  Returns {status}   status: OK | NOT_FOUND
]]
--@include lib/status.lua
local k = {schedules = KEYS[1], schedule_due = KEYS[2]}
local name = ARGV[1]

if redis.call('HDEL', k.schedules, name) == 0 then return {ST_NOT_FOUND} end
redis.call('ZREM', k.schedule_due, name)
return {ST_OK}
