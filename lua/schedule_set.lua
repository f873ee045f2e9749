--[[ schedule_set
  Create or replace a named schedule of an action. An unchanged schedule keeps its due time
  (every worker declaring the same schedule at start leaves it as it is).
  KEYS[1] definition    HASH  the action's settings
  KEYS[2] schedules     HASH  schedule name -> msgpack record (spec, time zone, input)
  KEYS[3] schedule_due  ZSET  schedule name -> next occurrence ms
  ARGV[1] name      schedule name
  ARGV[2] record    msgpack map: the schedule's record, opaque here except its input
  ARGV[3] first_ms  the first occurrence (computed by the client from server time;
                    0 .. 2^53)
  Returns {status, changed}   status: OK | NO_ACTION; changed: 1 created/replaced, 0 same
]]
--@include lib/status.lua
--@include lib/checked.lua
local k = {definition = KEYS[1], schedules = KEYS[2], schedule_due = KEYS[3]}
local name = ARGV[1]
local record = ARGV[2]
local first_ms = arg_int(ARGV[3], 0, INT_MAX)

if not arg_map(record) then return {ST_BAD_ARG, 2} end
if not first_ms then return {ST_BAD_ARG, 3} end

if redis.call('EXISTS', k.definition) == 0 then return {ST_NO_ACTION} end
if redis.call('HGET', k.schedules, name) == record
  and redis.call('ZSCORE', k.schedule_due, name) then
  return {ST_OK, 0}
end
redis.call('HSET', k.schedules, name, record)
redis.call('ZADD', k.schedule_due, first_ms, name)
return {ST_OK, 1}
