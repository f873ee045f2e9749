--[[ lib/queue
  Moving runs between the pending, delayed and lease sets of one action queue.
  Every helper takes the keys it touches as arguments (all from the caller's KEYS).
]]
--@include lib/run.lua
--@include lib/owners.lua
--@include lib/ended.lua
--@include lib/tally.lua

local function queue_push(meta_key, pending_key, run_id)
  local seq = redis.call('HINCRBY', meta_key, 'qseq', 1)
  redis.call('ZADD', pending_key, seq, run_id)
end

-- Put a run back to wait for its next attempt, after its backoff. Returns 1 when it is
-- ready now (the caller should wake pollers), 0 when it waits in `delayed`.
local function queue_retry(k, run_id, run, now, backoff_base, backoff_cap)
  run.s = RUN_PENDING
  run.st = nil
  owned_drop(k.owned, run.o, run_id)
  run.o = nil
  local delay = run_backoff_ms(backoff_base, backoff_cap, run.a)
  run.rd = now + delay
  run_save(k.runs, run_id, run)
  if delay > 0 then
    redis.call('ZADD', k.delayed, now + delay, run_id)
    return 0
  end
  queue_push(k.meta, k.pending, run_id)
  return 1
end

-- End a run for good as FAILED / TIMED_OUT: kept in `failed` (listable, re-queueable);
-- waiters on `k.ended` are told.
local function queue_bury(k, run_id, run, now, status)
  run.s = status
  run.ct = now
  owned_drop(k.owned, run.o, run_id)
  run.o = nil
  run_save(k.runs, run_id, run)
  redis.call('ZADD', k.failed, now, run_id)
  run_ended(k.ended, run_id)
  if status == RUN_TIMED_OUT then redis.call('HINCRBY', k.meta, TALLY_TIMED_OUT, 1) end
  tally_ended(k.meta, now, 'f', 1)
end

-- Give a buried run (FAILED, TIMED_OUT or CANCELLED) a fresh set of attempts: its record
-- reads PENDING again, ready since `now`. The caller moves it from `failed` to `pending`.
local function queue_unbury(k, run_id, run, max_retries, now)
  if run.s == RUN_TIMED_OUT then tally_untimed(k.meta, 1) end
  run.s = RUN_PENDING
  run.a = 0
  run.mr = max_retries
  run.ct = nil
  run.st = nil
  run.lrk = nil
  run.rd = now
  run_save(k.runs, run_id, run)
end

-- Take back up to `limit` runs whose lease deadline has passed. A run with attempts left
-- goes back to wait; one on its last attempt ends TIMED_OUT. Returns how many became ready.
local function queue_expire(k, now, limit, backoff_base, backoff_cap)
  local ids = redis.call('ZRANGE', k.leases, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  local ready, expired = 0, 0
  for _, run_id in ipairs(ids) do
    redis.call('ZREM', k.leases, run_id)
    local run = run_load(k.runs, run_id)
    if run and run.s == RUN_RUNNING then
      expired = expired + 1
      run.err = 'lease expired: no complete, fail or touch within the action timeout'
      run.tb = nil
      if run.a < run.mr then
        ready = ready + queue_retry(k, run_id, run, now, backoff_base, backoff_cap)
      else
        queue_bury(k, run_id, run, now, RUN_TIMED_OUT)
      end
    end
  end
  if expired > 0 then redis.call('HINCRBY', k.meta, 'stat:reclaimed_deadline', expired) end
  return ready
end

-- Move up to `limit` delayed runs whose time has come into `pending`.
local function queue_promote(k, now, limit)
  local ids = redis.call('ZRANGE', k.delayed, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  for _, run_id in ipairs(ids) do
    redis.call('ZREM', k.delayed, run_id)
    queue_push(k.meta, k.pending, run_id)
  end
  return #ids
end

-- The earliest time a delayed run becomes ready, or -1.
local function queue_next_due(delayed_key)
  local first = redis.call('ZRANGE', delayed_key, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return tonumber(first[2])
end

-- The earliest time something in this queue changes by itself: a delayed run becomes
-- ready or a lease expires. -1 if nothing is scheduled.
local function queue_next_event(delayed_key, leases_key)
  local next_ms = queue_next_due(delayed_key)
  local first = redis.call('ZRANGE', leases_key, 0, 0, 'WITHSCORES')
  if #first > 0 then
    local deadline = tonumber(first[2])
    if deadline < NEVER_MS and (next_ms < 0 or deadline < next_ms) then next_ms = deadline end
  end
  return next_ms
end

-- Forget a finished run entirely (retention).
local function queue_forget(k, run_id)
  local run = run_load(k.runs, run_id)
  if run and run.ik then redis.call('HDEL', k.idempotency, run.ik) end
  redis.call('HDEL', k.runs, run_id)
  redis.call('HDEL', k.inputs, run_id)
end

-- Drop finished runs from `set_key` older than `max_age_ms` or beyond `max_count`,
-- at most `limit` per call.
local function queue_retain(k, set_key, now, max_age_ms, max_count, limit)
  local removed = 0
  if max_age_ms >= 0 then
    local old = redis.call('ZRANGE', set_key, '-inf', now - max_age_ms, 'BYSCORE', 'LIMIT', 0, limit)
    for _, run_id in ipairs(old) do queue_forget(k, run_id) end
    if #old > 0 then redis.call('ZREM', set_key, unpack(old)) end
    removed = #old
  end
  if max_count >= 0 and removed < limit then
    local excess = redis.call('ZCARD', set_key) - max_count
    if excess > 0 then
      if excess > limit - removed then excess = limit - removed end
      local ids = redis.call('ZRANGE', set_key, 0, excess - 1)
      for _, run_id in ipairs(ids) do queue_forget(k, run_id) end
      if #ids > 0 then redis.call('ZREM', set_key, unpack(ids)) end
    end
  end
end
