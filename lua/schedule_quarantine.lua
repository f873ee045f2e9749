--[[ schedule_quarantine
  Set aside a schedule its caller cannot evaluate (a time zone this host does not know, a
  record that does not decode): out of `schedules` and `schedule_due`, into the action's
  quarantine with its record and why, so the action's other schedules stay due. Only
  while the schedule still holds the record the caller read: one set again since is left.
  KEYS[1] schedules        HASH  schedule name -> msgpack record
  KEYS[2] schedule_due     ZSET  schedule name -> next occurrence ms
  KEYS[3] schedule_paused  ZSET  schedule name -> the occurrence it holds while paused
  KEYS[4] schedule_last    HASH  schedule name -> msgpack note of the runs it created
  KEYS[5] quarantine       STREAM  records set aside (lib/record.lua)
  ARGV[1] name     schedule name
  ARGV[2] record   the record as the caller read it
  ARGV[3] why      why it cannot be evaluated
  Returns {status}   status: OK (set aside) | NOT_FOUND (no such schedule) | CONFLICT (its
          record changed since it was read)
]]
--@include lib/status.lua
--@include lib/record.lua
--@include lib/schedule.lua
local k = {schedules = KEYS[1], schedule_due = KEYS[2], schedule_paused = KEYS[3],
  schedule_last = KEYS[4], quarantine = KEYS[5]}
local name = ARGV[1]
local record = ARGV[2]
local why = ARGV[3]

local stored = redis.call('HGET', k.schedules, name)
if not stored then return {ST_NOT_FOUND} end
if stored ~= record then return {ST_CONFLICT} end
record_aside(k.quarantine, 'schedule', name, record, why, '')
schedule_drop(k, name)
return {ST_OK}
