--[[ lib/queue
  Moving runs between the pending, delayed and lease sets of one action queue.
  Every helper takes the keys it touches as arguments (all from the caller's KEYS).
]]
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/owners.lua
--@include lib/ended.lua
--@include lib/tally.lua
--@include lib/priority.lua
--@include lib/num.lua
--@include lib/ids.lua
--@include lib/offer.lua
--@include lib/flow.lua
--@include lib/graph.lua

-- A new place in the queue for `run`: its score in `pending`, after every run of a lower
-- priority value and after those of its own queued before it (its priority `p`,
-- default 0, stays with it); a run placed fairly (`fw`), in its key's turn (lib/flow.lua).
local function queue_place(k, run)
  if run.fw and k.flow_vt then return flow_place(k, run.fk, run.fw, run.p or 0) end
  return priority_score(run.p or 0, redis.call('HINCRBY', k.meta, 'qseq', '1'))
end

-- Queue `run` as ready to claim, at a new place (queue_place).
local function queue_push(k, run_id, run)
  redis.call('ZADD', k.pending, num_arg(queue_place(k, run)), run_id)
end

-- How many of `want` runs may start now: at most the action's max_concurrency minus its
-- leases, and at most what its rate limit's window has room for (starts older than the
-- window are dropped first). Returns that number and the rate room, nil when the limit
-- was not asked (none, or nothing could start anyway).
local function queue_room(k, action, now, want)
  local n = want
  if action.max_concurrency > 0 then
    local free = action.max_concurrency - redis.call('ZCARD', k.leases)
    if free < n then n = free end
  end
  local rate_room = nil
  if n > 0 and action.rate_max > 0 then
    redis.call('ZREMRANGEBYSCORE', k.rate, '-inf', now - action.rate_per_ms)
    rate_room = action.rate_max - redis.call('ZCARD', k.rate)
    if rate_room < n then n = rate_room end
  end
  return n, rate_room
end

-- When a lease taken now ends (NEVER_MS for an action without a timeout).
local function queue_lease_deadline(action, now)
  if action.timeout_ms > 0 then return now + action.timeout_ms end
  return NEVER_MS
end

-- Hand the runs `runs` (PENDING, already out of `pending`; `ids` their ids, in the same
-- order) to a worker: each RUNNING under a new fencing token (in that order; from
-- `first_token` on when the caller took them from `meta` already), leased until
-- `deadline`, indexed under its owner, its start logged in `rate` when `log_rate`; one
-- call per set for the whole batch. The caller records the owner in `owners` and the
-- poll memo. Scores go to Redis as text made once (lib/num.lua).
local function queue_take_many(k, ids, runs, worker_id, owner, now, deadline, log_rate,
    first_token)
  local n = #ids
  if n == 0 then return end
  local first = (first_token or ids_take(k.meta, 'token', n, now)) - 1
  local owned, records, leases = {}, {}, {}
  local rate = log_rate and {} or nil
  local at_deadline, at_now = num_arg(deadline), num_arg(now)
  local prefix = owned_entry(owner, '')
  local pack = cmsgpack.pack
  local j = 0
  for i = 1, n do
    local run_id, run = ids[i], runs[i]
    local token = first + i
    run.s = RUN_RUNNING
    run.a = run.a + 1
    run.t = token
    run.w = worker_id
    run.o = owner
    run.st = now
    j = j + 2
    owned[j - 1] = '0'
    owned[j] = prefix .. run_id
    records[j - 1] = run_id
    records[j] = pack(run)
    leases[j - 1] = at_deadline
    leases[j] = run_id
    if rate then
      rate[j - 1] = at_now
      rate[j] = token
    end
  end
  redis.call('ZADD', k.owned, unpack(owned))
  redis.call('HSET', k.runs, unpack(records))
  redis.call('ZADD', k.leases, unpack(leases))
  if rate then redis.call('ZADD', k.rate, unpack(rate)) end
  flow_started(k, runs, now)
end

-- queue_take_many of one run (`token`: its token, when the caller took it already).
local function queue_take(k, run_id, run, worker_id, owner, now, deadline, log_rate, token)
  queue_take_many(k, {run_id}, {run}, worker_id, owner, now, deadline, log_rate, token)
end

-- Put a run back to wait for its next attempt, after its backoff, noted as retried
-- (`k.noted`: lib/tally.lua). Returns 1 when it is ready now (the caller should wake
-- pollers), 0 when it waits in `delayed`.
local function queue_retry(k, run_id, run, now, backoff_base, backoff_cap)
  history_note(k.noted, HISTORY.RETRIED, 1)
  flow_release(k, run.fk)
  run.s = RUN_PENDING
  run.st = nil
  offer_forget(run)
  owned_drop(k.owned, run.o, run_id)
  run.o = nil
  local delay = run_backoff_ms(backoff_base, backoff_cap, run.a)
  run.rd = now + delay
  record_save(k.runs, run_id, run)
  if delay > 0 then
    redis.call('ZADD', k.delayed, now + delay, run_id)
    return 0
  end
  queue_push(k, run_id, run)
  return 1
end

-- End a run for good as FAILED / TIMED_OUT / CANCELLED: kept in `failed` (listable,
-- re-queueable); waiters on `k.ended` are told. A failure is noted in `k.noted`
-- (lib/tally.lua); a cancel is no failure per minute.
local function queue_bury(k, run_id, run, now, status)
  if run.s == RUN_RUNNING then flow_release(k, run.fk) end
  run.s = status
  run.ct = now
  offer_forget(run)
  owned_drop(k.owned, run.o, run_id)
  run.o = nil
  if run.gd or run.bt or run.dg then graph_ended(k, run_id, run, now) end
  record_save(k.runs, run_id, run)
  redis.call('ZADD', k.failed, now, run_id)
  run_ended(k.ended, run_id)
  if status == RUN_TIMED_OUT then redis.call('HINCRBY', k.meta, TALLY_TIMED_OUT, 1) end
  if status ~= RUN_CANCELLED then history_note(k.noted, HISTORY.FAILED, 1) end
end

-- Give a buried run (FAILED, TIMED_OUT or CANCELLED) a fresh set of attempts: its record
-- reads PENDING again, ready since `now`. Changes the record only: the caller saves it,
-- moves it from `failed` to `pending` and takes the returned count (1 when it had timed
-- out, else 0) off the timed-out tally, so a batch does each in one step.
local function queue_unbury(run, max_retries, now)
  local timed_out = run.s == RUN_TIMED_OUT and 1 or 0
  run.s = RUN_PENDING
  run.a = 0
  run.mr = max_retries
  run.ct = nil
  run.st = nil
  run.lrk = nil
  run.rd = now
  if run.fb ~= nil then run.fb = nil end
  return timed_out
end

-- Put back `run`, offered to a poller that did not accept it (lib/offer.lua; offer_free;
-- its lease already out of `leases`): PENDING again at its place in `pending`, so it is
-- next of its priority, its attempt not spent and its start out of the rate log; one
-- more offer run out in a row (`ox`). The offer's token holds no more: the next
-- hand-out gets a new one.
local function queue_unoffer(k, run_id, run)
  local place, returns = run.q, (run.ox or 0) + 1
  flow_release(k, run.fk)
  run.s = RUN_PENDING
  run.a = run.a - 1
  run.st = nil
  owned_drop(k.owned, run.o, run_id)
  run.o = nil
  offer_forget(run)
  run.ox = returns
  record_save(k.runs, run_id, run)
  if k.rate then redis.call('ZREM', k.rate, run.t) end
  if place then
    redis.call('ZADD', k.pending, num_arg(place), run_id)
  else
    queue_push(k, run_id, run)
  end
end

-- Take back up to `limit` runs whose lease deadline has passed. A run with attempts left
-- goes back to wait; one on its last attempt ends TIMED_OUT. An offer not accepted in
-- its window goes back to its place, unspent (queue_unoffer; stat:offers_expired), but
-- for the one that runs out after OFFER_FREE_RETURNS in a row: that one counts as its
-- attempt's lease. One whose record the scripts cannot use is set aside (run_aside: `k`
-- names quarantine). What it retried or failed is written to the history before it
-- returns (tally_save). Returns how many became ready.
local function queue_expire(k, now, limit, backoff_base, backoff_cap)
  local ids = redis.call('ZRANGE', k.leases, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  local ready, expired, offers = 0, 0, 0
  for _, run_id in ipairs(ids) do
    redis.call('ZREM', k.leases, run_id)
    local run, why, raw = run_load(k.runs, run_id)
    if run == false then
      run_aside(k, run_id, raw, why)
    elseif run and run.s == RUN_RUNNING and offer_free(run) then
      offers = offers + 1
      queue_unoffer(k, run_id, run)
      ready = ready + 1
    elseif run and run.s == RUN_RUNNING then
      if run.of ~= nil then
        offers = offers + 1
        run.err = 'offer not accepted within its window a 4th time in a row: counted as the attempt'
      else
        expired = expired + 1
        run.err = 'lease expired: no complete, fail or touch within the action timeout'
      end
      run.tb = nil
      if run.a < run.mr then
        ready = ready + queue_retry(k, run_id, run, now, backoff_base, backoff_cap)
      else
        queue_bury(k, run_id, run, now, RUN_TIMED_OUT)
      end
    end
  end
  if expired > 0 then redis.call('HINCRBY', k.meta, 'stat:reclaimed_deadline', expired) end
  if offers > 0 then redis.call('HINCRBY', k.meta, 'stat:offers_expired', offers) end
  tally_save(k, now)
  return ready
end

-- Move up to `limit` delayed runs whose time has come into `pending`, each at its priority.
local function queue_promote(k, now, limit)
  local ids = redis.call('ZRANGE', k.delayed, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  for _, run_id in ipairs(ids) do
    redis.call('ZREM', k.delayed, run_id)
    queue_push(k, run_id, run_load(k.runs, run_id) or {})
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

-- The msgpack bytes of a record's key "ik" (fixstr of 2), and of s = RUN_TIMED_OUT (key
-- "s", then that integer): a record without them has no idempotency key and did not
-- time out. (Written out: a Function library's own code runs without `string`.)
local RECORD_IK = '\162ik'
local RECORD_TIMED_OUT = '\161s\5' -- RUN_TIMED_OUT

-- Forget the runs `ids` entirely (retention, purge): records, inputs, idempotency keys,
-- and their entries in `set_key`; a few commands for the whole batch. In a queue that has
-- held a graph (meta `graph`), a run's graph entries are left to a message in `k.outbox`
-- (lib/graph.lua, graph_forget). Returns how many of
-- them were TIMED_OUT when `count_timed_out`, else 0. A record is read only for what it
-- can tell: its idempotency key while any is kept, whether it timed out when counted;
-- and decoded only when its bytes hold one of them (nearly none do).
local function queue_forget(k, set_key, ids, count_timed_out)
  if #ids == 0 then return 0 end
  local idem_keys, timed_out = {}, 0
  local find_ik = redis.call('HLEN', k.idempotency) > 0
  local graph = redis.call('HEXISTS', k.meta, 'graph') == 1
  if find_ik or count_timed_out or graph then
    local records = redis.call('HMGET', k.runs, unpack(ids))
    local now = graph and now_ms()
    for i = 1, #ids do
      local raw = records[i]
      if raw and graph then graph_forget(k, ids[i], raw, now) end
      if raw and ((find_ik and string.find(raw, RECORD_IK, 1, true))
          or (count_timed_out and string.find(raw, RECORD_TIMED_OUT, 1, true))) then
        local run = run_decode(raw)  -- one that does not decode is forgotten all the same
        if run and run.ik then idem_keys[#idem_keys + 1] = run.ik end
        if run and run.s == RUN_TIMED_OUT then timed_out = timed_out + 1 end
      end
    end
  end
  if #idem_keys > 0 then redis.call('HDEL', k.idempotency, unpack(idem_keys)) end
  redis.call('HDEL', k.runs, unpack(ids))
  redis.call('HDEL', k.inputs, unpack(ids))
  redis.call('ZREM', set_key, unpack(ids))
  return timed_out
end

-- Drop finished runs from `set_key` older than `max_age_ms` or beyond `max_count`,
-- at most `limit` per call.
local function queue_retain(k, set_key, now, max_age_ms, max_count, limit)
  local removed = 0
  if max_age_ms >= 0 then
    local old = redis.call('ZRANGE', set_key, '-inf', now - max_age_ms, 'BYSCORE', 'LIMIT', 0, limit)
    queue_forget(k, set_key, old, false)
    removed = #old
  end
  if max_count >= 0 and removed < limit then
    local excess = redis.call('ZCARD', set_key) - max_count
    if excess > 0 then
      if excess > limit - removed then excess = limit - removed end
      local ids = redis.call('ZRANGE', set_key, 0, excess - 1)
      queue_forget(k, set_key, ids, false)
    end
  end
end
