--[[ lib/schedule
  What a schedule's scripts share: what it last did (its `schedule_last` note) and taking
  a schedule out everywhere it is kept. A schedule lives in `schedules` (its record) and
  in exactly one of `schedule_due` (active: its next occurrence) or `schedule_paused`
  (paused: the occurrence it holds until resumed).
]]
--@include lib/record.lua

-- Note in hash `last_key` that schedule `name` created run `run_id` at `now`: for its
-- occurrence `occurrence` (o, r, a), or, when `occurrence` is nil, by a trigger (t, u).
-- A note that does not decode only remembers: it is started again.
local function schedule_note(last_key, name, run_id, now, occurrence)
  local note = record_load(last_key, name) or {}
  if occurrence then
    note.o, note.r, note.a = occurrence, run_id, now
  else
    note.t, note.u = now, run_id
  end
  record_save(last_key, name, note)
end

-- Take schedule `name` out of k.schedules, k.schedule_due, k.schedule_paused and
-- k.schedule_last (runs it created stay).
local function schedule_drop(k, name)
  redis.call('HDEL', k.schedules, name)
  redis.call('ZREM', k.schedule_due, name)
  redis.call('ZREM', k.schedule_paused, name)
  redis.call('HDEL', k.schedule_last, name)
end

-- The record of schedule `name`, decoded: nil when there is none; false when it does not
-- decode (or its input is not bytes), once it was set aside into k.quarantine with why
-- and dropped (the schedule fires no more until replayed).
local function schedule_load(k, name)
  local schedule, why, record = record_load(k.schedules, name)
  if schedule and schedule.i and type(schedule.i) ~= 'string' then
    schedule, why = false, 'its input is not bytes'
  end
  if schedule == false then
    record_aside(k.quarantine, 'schedule', name, record, why, '')
    schedule_drop(k, name)
  end
  return schedule
end
