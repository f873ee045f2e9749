--[[ lib/tally
  Counters kept for operators (read by action_counts), in the queue's meta hash:
  - runs that ended per minute over the last hour: a ring of 60 one-minute buckets, field
    `m<slot>` holds the bucket's minute (ms / 60000), `m<slot>c` completed and `m<slot>f`
    failed (FAILED or TIMED_OUT) runs of that minute. A bucket is reset when its slot
    comes round again, so the ring never holds more than 180 fields, and a bucket older
    than an hour is never read;
  - `n:timed_out`: how many runs in the failed set are TIMED_OUT;
  - `n:completed`, `n:failed`: runs that ended so, in all (counters for Prometheus).
]]
local TALLY_SLOTS = 60
local TALLY_TIMED_OUT = 'n:timed_out'
local TALLY_TOTAL = {c = 'n:completed', f = 'n:failed'}

-- Count `n` runs that ended at `now` as `kind` ('c' completed, 'f' failed).
local function tally_ended(meta_key, now, kind, n)
  if n <= 0 then return end
  local minute = math.floor(now / 60000)
  local at = 'm' .. (minute % TALLY_SLOTS)
  if tonumber(redis.call('HGET', meta_key, at)) ~= minute then
    redis.call('HSET', meta_key, at, minute, at .. 'c', 0, at .. 'f', 0)
  end
  redis.call('HINCRBY', meta_key, at .. kind, n)
  redis.call('HINCRBY', meta_key, TALLY_TOTAL[kind], n)
end

-- `n` TIMED_OUT runs left the failed set (re-queued or purged). Runs buried before this
-- counter existed were never counted, so it never goes below zero.
local function tally_untimed(meta_key, n)
  local left = tonumber(redis.call('HGET', meta_key, TALLY_TIMED_OUT)) or 0
  if left <= 0 or n <= 0 then return end
  if n > left then n = left end
  redis.call('HINCRBY', meta_key, TALLY_TIMED_OUT, -n)
end

-- Every counter field, for forgetting them with the action.
local function tally_fields()
  local fields = {TALLY_TIMED_OUT, TALLY_TOTAL.c, TALLY_TOTAL.f}
  for slot = 0, TALLY_SLOTS - 1 do
    local at = 'm' .. slot
    fields[#fields + 1] = at
    fields[#fields + 1] = at .. 'c'
    fields[#fields + 1] = at .. 'f'
  end
  return fields
end
