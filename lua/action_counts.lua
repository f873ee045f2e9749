--[[ action_counts
  How many runs an action holds in each state, and how many ended in each minute of the
  last hour (lib/history.lua). Read only; a handful of O(1) reads and one BITFIELD_RO.
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters (lib/tally.lua)
  KEYS[3] pending  ZSET  runs ready to be claimed
  KEYS[4] delayed  ZSET  runs waiting for their due time (delay or retry backoff)
  KEYS[5] leases   ZSET  running runs
  KEYS[6] done     ZSET  completed runs kept for retention
  KEYS[7] failed   ZSET  FAILED, TIMED_OUT and CANCELLED runs
  KEYS[8] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[9] history  STRING  runs per minute over 72 hours (lib/history.lua)
  KEYS[10] flow_held ZSET  ready runs held back by their flow key's limit (lib/flow.lua)
  KEYS[11] waiting ZSET  runs waiting for their parents to end (lib/graph.lua)
  Returns {status, now_ms, pending, delayed, running, completed, failed, timed_out,
          next_due_ms, completed_total, failed_total, quarantined, awaiting_parents,
          completed * 60, failed * 60}
          status: OK | NO_ACTION; the totals count runs ended since registration;
          failed excludes timed_out; next_due_ms is -1 without delayed runs; quarantined:
          records set aside in the action's quarantine (runs, schedules, slots); pending
          counts the ready runs held back by their flow key's limit; awaiting_parents
          the runs (PENDING) waiting for their parents to end; the per-minute
          counts run oldest first, the last being the current minute
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/tally.lua
local k = {definition = KEYS[1], meta = KEYS[2], pending = KEYS[3], delayed = KEYS[4],
  leases = KEYS[5], done = KEYS[6], failed = KEYS[7], quarantine = KEYS[8],
  history = KEYS[9], flow_held = KEYS[10], waiting = KEYS[11]}

if redis.call('EXISTS', k.definition) == 0 then return {ST_NO_ACTION} end
local now = now_ms()
local buried = redis.call('ZCARD', k.failed)
local timed_out = math.min(tonumber(redis.call('HGET', k.meta, TALLY_TIMED_OUT)) or 0, buried)
local next_due = -1
local first = redis.call('ZRANGE', k.delayed, 0, 0, 'WITHSCORES')
if #first > 0 then next_due = tonumber(first[2]) end
local totals = redis.call('HMGET', k.meta, TALLY_TOTAL.c, TALLY_TOTAL.f)
local waiting = redis.call('ZCARD', k.pending) + redis.call('ZCARD', k.flow_held)
local out = {ST_OK, now, waiting, redis.call('ZCARD', k.delayed),
  redis.call('ZCARD', k.leases), redis.call('ZCARD', k.done), buried - timed_out, timed_out,
  next_due, tonumber(totals[1]) or 0, tonumber(totals[2]) or 0,
  redis.call('XLEN', k.quarantine), redis.call('ZCARD', k.waiting)}

local completed, failed = history_recent(k.history, now, 60)
for _, n in ipairs(completed) do out[#out + 1] = n end
for _, n in ipairs(failed) do out[#out + 1] = n end
return out
