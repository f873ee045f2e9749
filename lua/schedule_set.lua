--[[ schedule_set
  Create or replace a named schedule of an action. An unchanged schedule keeps its due time
  (every worker declaring the same schedule at start leaves it as it is), and a paused one
  stays paused (replaced, it holds its new first occurrence until resumed): a pause is
  the operator's, and a deploy that declares the schedule again does not undo it.
  KEYS[1] definition       HASH  the action's settings
  KEYS[2] schedules        HASH  schedule name -> msgpack record (spec, time zone, input)
  KEYS[3] schedule_due     ZSET  schedule name -> next occurrence ms (active schedules)
  KEYS[4] schedule_paused  ZSET  schedule name -> the occurrence it holds (paused ones)
  ARGV[1] name      schedule name
  ARGV[2] record    msgpack map: the schedule's record, opaque here except its input
  ARGV[3] first_ms  the first occurrence (computed by the client from server time;
                    0 .. 2^53)
  Returns {status, changed, paused}   status: OK | NO_ACTION; changed: 1 created/replaced,
    0 same; paused: 1 when the schedule is paused
]]
--@include lib/status.lua
--@include lib/checked.lua
local k = {definition = KEYS[1], schedules = KEYS[2], schedule_due = KEYS[3],
  schedule_paused = KEYS[4]}
local name = ARGV[1]
local record = ARGV[2]
local first_ms = arg_int(ARGV[3], 0, INT_MAX)

if not arg_map(record) then return {ST_BAD_ARG, 2} end
if not first_ms then return {ST_BAD_ARG, 3} end

if redis.call('EXISTS', k.definition) == 0 then return {ST_NO_ACTION} end
local same = redis.call('HGET', k.schedules, name) == record
if redis.call('ZSCORE', k.schedule_paused, name) then
  if same then return {ST_OK, 0, 1} end
  redis.call('HSET', k.schedules, name, record)
  redis.call('ZADD', k.schedule_paused, first_ms, name)
  return {ST_OK, 1, 1}
end
if same and redis.call('ZSCORE', k.schedule_due, name) then return {ST_OK, 0, 0} end
redis.call('HSET', k.schedules, name, record)
redis.call('ZADD', k.schedule_due, first_ms, name)
return {ST_OK, 1, 0}
