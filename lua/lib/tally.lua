--[[ lib/tally
  Counters kept for operators (read by action_counts and action_history):
  - in the queue's meta hash: `n:completed`, `n:failed` (runs that ended so, in all:
    counters for Prometheus) and `n:timed_out` (how many runs in the failed set are
    TIMED_OUT);
  - in the action's history (lib/history.lua): runs completed, failed and retried per
    minute over 72 hours, with their pickup latency and handler duration.
  A script that ends or retries runs notes each in `k.noted` (history_note,
  history_attempt), then writes them all with tally_save before it answers: one
  history write per call, whatever the batch.
]]
--@include lib/history.lua
local TALLY_TIMED_OUT = 'n:timed_out'
local TALLY_TOTAL = {c = 'n:completed', f = 'n:failed'}

-- Write what this call noted in `k.noted`: the totals in meta and the minute of `now` in
-- the history (one BITFIELD); then nothing is noted.
local function tally_save(k, now)
  local noted = k.noted
  local completed, failed = noted[HISTORY.COMPLETED], noted[HISTORY.FAILED]
  if completed then redis.call('HINCRBY', k.meta, TALLY_TOTAL.c, completed) end
  if failed then redis.call('HINCRBY', k.meta, TALLY_TOTAL.f, failed) end
  history_save(k.history, now, noted)
  k.noted = {}
end

-- `n` TIMED_OUT runs left the failed set (re-queued or purged). Runs buried before this
-- counter existed were never counted, so it never goes below zero.
local function tally_untimed(meta_key, n)
  local left = tonumber(redis.call('HGET', meta_key, TALLY_TIMED_OUT)) or 0
  if left <= 0 or n <= 0 then return end
  if n > left then n = left end
  redis.call('HINCRBY', meta_key, TALLY_TIMED_OUT, -n)
end

-- Every counter field, for forgetting them with the action: the totals, and the hour
-- of per-minute fields versions before the history kept in meta (`m<slot>`, `m<slot>c`,
-- `m<slot>f` for slots 0 .. 59).
local function tally_fields()
  local fields = {TALLY_TIMED_OUT, TALLY_TOTAL.c, TALLY_TOTAL.f}
  for slot = 0, 59 do
    local at = 'm' .. slot
    fields[#fields + 1] = at
    fields[#fields + 1] = at .. 'c'
    fields[#fields + 1] = at .. 'f'
  end
  return fields
end
