--[[ lib/flow
  Flow control by key (lua/README.md, "Flow control"): a run invoked with a flow key
  carries it in its record (`fk`). All of a key's state lives in three keys of its
  action's queue, so every script stays in the queue's hash slot:
  `flows` HASH  "r:<key>" -> how many runs of the key are RUNNING (absent: none)
  `flow_held` ZSET  "<key>\0<score, 14 hex digits>\0<run id>" (score 0, ordered by
    bytes): ready runs held back because their key was at its concurrency limit, each
    with its score in `pending`, so it goes back to its place
  `flow_vt` ZSET  key -> the virtual time of its last run placed fairly
  `flow_rate` ZSET  "<key>\0<start ms, 15 digits>\0<token>" (score 0, ordered by bytes):
    each key's starts within its rate window, when the action limits them
  `flow_once` ZSET  key -> ms at which the reaper looks at its last run again (dedup,
    throttle, debounce: flow_once_existing)
  and in `flows`, "p:<key>" -> ms until which a handler's RateLimited paused the key,
  "o:<key>" -> the key's last run (dedup, throttle, debounce)
  A run placed fairly (`fw`: its key's step, in the record) is scored
  priority * 2^45 + virtual time: max(the queue's virtual time, its key's last plus the
  key's step (FLOW.STEP / weight)), so claims take the keys' runs in turn (start-time
  fair queueing), lower priority values first, and a key's own runs in their order.
  The queue's virtual time is that of the head of `pending`, never below meta `fvt`.
  Every helper costs a run without `fk` one table read.
]]
--@include lib/priority.lua
--@include lib/checked.lua
--@include lib/run.lua

-- One table, not a local each, to keep the Functions library's locals in bounds:
--   STEP: a key's step in virtual time at weight 1; weight w steps STEP / w (at least 1);
--   DEDUP, THROTTLE, DEBOUNCE: the modes of flow_once (FlowControl's);
--   ONCE_RECHECK_MS: how often the reaper looks again at a deduplicated run still
--     waiting or running;
--   SWEEP: entries of keys gone idle that one sweep forgets at most;
--   HELD_SCAN: held runs one look at a key's (or the queue's) held runs reads at most.
local FLOW = {STEP = 1000, DEDUP = 1, THROTTLE = 2, DEBOUNCE = 3, ONCE_RECHECK_MS = 1000,
  SWEEP = 100, HELD_SCAN = 16}

-- The `flows` field of key `key`'s running count.
local function flow_field(key)
  return 'r:' .. key
end

-- The virtual time of the queue now: that of the head of `pending` (a score's part
-- below the priority), never below meta `fvt` (kept, so it never goes back while runs
-- are held). `head`: ZRANGE pending 0 0 WITHSCORES.
local function flow_now(k, head)
  local floor = tonumber(redis.call('HGET', k.meta, 'fvt')) or 0
  local vnow = head[2] and tonumber(head[2]) % PRIORITY_SEQ_SPAN or 0
  if vnow > floor then
    redis.call('HSET', k.meta, 'fvt', string.format('%d', vnow))
    return vnow
  end
  return floor
end

-- The score in `pending` of a fair run of key `key` at priority `p`, stepping `step`
-- (its key's FLOW.STEP / weight): one step past the key's last placed run while that is
-- ahead of the queue's virtual time V; else (a key with nothing waiting, new or idle)
-- V - 1, just before the turn at the head, so a key's first run waits for the other
-- new keys' first runs, not for a turn of every busy key. Records the key's new last.
local function flow_place(k, key, step, p)
  local vnow = flow_now(k, redis.call('ZRANGE', k.pending, 0, 0, 'WITHSCORES'))
  local last = tonumber(redis.call('ZSCORE', k.flow_vt, key))
  local vt
  if last and last + step > vnow then
    vt = last + step
  else
    vt = math.max(vnow - 1, 0)
  end
  redis.call('ZADD', k.flow_vt, string.format('%d', vt), key)
  return priority_score(p, vt)
end

-- The score of the first of `n` fair runs of key `key` at priority `p`, queued at once
-- (flow_place for each in turn: the i-th, from 0, is `step * i` further on).
local function flow_place_many(k, key, step, p, n)
  local first = flow_place(k, key, step, p)
  if n > 1 then
    redis.call('ZADD', k.flow_vt, string.format('%d', first % PRIORITY_SEQ_SPAN + step * (n - 1)),
      key)
  end
  return first
end

-- Forget a batch of keys whose last placed run is before the queue's virtual time
-- (nothing of theirs waits ahead of it); when nothing waits or is held at all, every
-- key's and the queue's virtual time. So a key that goes idle leaves nothing behind.
local function flow_sweep(k)
  if not k.flow_vt or redis.call('EXISTS', k.flow_vt) == 0 then return end
  local head = redis.call('ZRANGE', k.pending, 0, 0, 'WITHSCORES')
  local old
  if not head[1] and redis.call('EXISTS', k.flow_held) == 0 then
    old = redis.call('ZRANGE', k.flow_vt, 0, FLOW.SWEEP - 1)
    if #old < FLOW.SWEEP then redis.call('HDEL', k.meta, 'fvt') end
  else
    old = redis.call('ZRANGE', k.flow_vt, '-inf', '(' .. flow_now(k, head), 'BYSCORE', 'LIMIT',
      0, FLOW.SWEEP)
  end
  if #old > 0 then redis.call('ZREM', k.flow_vt, unpack(old)) end
end

-- Running counts of keys, read once per call and counted on as runs are taken:
-- `limit` the action's flow concurrency (0: none).
local function flow_counts(k, limit)
  return {k = k, limit = limit, n = {}}
end

-- Is key `key` at its concurrency limit (counting the runs this call took)? Reads its
-- running count and its pause (flow_wait_until) in one HMGET, once per call.
local function flow_full(counts, key)
  if counts.limit == 0 then return false end
  local n = counts.n[key]
  if not n then
    local v = redis.call('HMGET', counts.k.flows, flow_field(key), 'p:' .. key)
    n = tonumber(v[1]) or 0
    counts.n[key] = n
    counts.pause = counts.pause or {}
    counts.pause[key] = v[2] or false
  end
  return n >= counts.limit
end

-- A run of key `key` was taken by this call.
local function flow_taken(counts, key)
  if counts.limit > 0 then counts.n[key] = (counts.n[key] or 0) + 1 end
end

-- The `flow_held` entry of run `run_id` of key `key` at score `score`.
local function flow_held_entry(key, score, run_id)
  return string.format('%s\0%014x\0%s', key, score, run_id)
end

-- Hold back ready run `run_id` (its record `run`, of key run.fk): it waits in
-- `flow_held` with its score (`score`, or its score in `pending`, where the caller takes
-- it out) until a run of its key ends. The record keeps the score (`hq`, so a cancel
-- finds the entry) and is saved.
local function flow_hold(k, run_id, run, score)
  score = score or tonumber(redis.call('ZSCORE', k.pending, run_id)) or 0
  run.hq = score
  record_save(k.runs, run_id, run)
  redis.call('ZADD', k.flow_held, 0, flow_held_entry(run.fk, score, run_id))
end

-- Run `run_id` (record `run`) no longer waits: its held entry, if any, goes.
local function flow_unhold_one(k, run_id, run)
  if run.fk and type(run.hq) == 'number' and k.flow_held then
    redis.call('ZREM', k.flow_held, flow_held_entry(run.fk, run.hq, run_id))
  end
end

-- The `flow_rate` entry of a start of key `key` at `at` ms under fencing token `token`.
local function flow_rate_entry(key, at, token)
  return string.format('%s\0%015d\0%d', key, at, token)
end

-- The runs `runs` (tables with `fk`, each RUNNING under its token since `now`) started:
-- count them per key, one HINCRBY a key, and log each start in `flow_rate` when the
-- caller set `k.flow_log` (the action limits each key's starts).
local function flow_started(k, runs, now)
  if not k.flows then return end
  local per, log, n_log = nil, {}, 0
  for i = 1, #runs do
    local run = runs[i]
    local key = run.fk
    if key then
      per = per or {}
      per[key] = (per[key] or 0) + 1
      if k.flow_log then
        log[n_log + 1], log[n_log + 2] = '0', flow_rate_entry(key, now, run.t)
        n_log = n_log + 2
      end
    end
  end
  if not per then return end
  if n_log > 0 then redis.call('ZADD', k.flow_rate, unpack(log, 1, n_log)) end
  for key, n in pairs(per) do redis.call('HINCRBY', k.flows, flow_field(key), n) end
end

-- Until when key `key` may start no run, or nil when it may start one now: paused by a
-- handler (`flows` "p:<key>", RateLimited), or its window full (the action's
-- flow_rate_max starts in any flow_rate_per_ms, counting the starts `counts` noted this
-- call). Reads once per key per call (cached in `counts`, with flow_counts): drops the
-- key's starts that left the window, counts those in it.
local function flow_wait_until(counts, action, key, now)
  local cached = counts.until_of and counts.until_of[key]
  if cached == nil then
    local k = counts.k
    cached = false
    local read = counts.pause and counts.pause[key]
    if read == nil then read = redis.call('HGET', k.flows, 'p:' .. key) end
    local pause = tonumber(read)
    if pause and pause > now then
      cached = pause
    elseif pause then
      redis.call('HDEL', k.flows, 'p:' .. key)
    end
    if not cached and action.flow_rate_max > 0 then
      local low = '[' .. key .. '\0'
      local edge = string.format('%s\0%015d', key, now - action.flow_rate_per_ms + 1)
      redis.call('ZREMRANGEBYLEX', k.flow_rate, low, '(' .. edge)
      counts.in_window = counts.in_window or {}
      counts.in_window[key] = redis.call('ZLEXCOUNT', k.flow_rate, '[' .. edge, '(' .. key .. '\1')
    end
    counts.until_of = counts.until_of or {}
    counts.until_of[key] = cached
  end
  if cached then return cached end
  if action.flow_rate_max > 0 and counts.in_window[key] >= action.flow_rate_max then
    -- The start whose leaving makes room: the oldest of the window (or the one that
    -- many places in, when this call took some).
    local at = counts.in_window[key] - action.flow_rate_max
    local edge = string.format('%s\0%015d', key, now - action.flow_rate_per_ms + 1)
    local first = redis.call('ZRANGE', counts.k.flow_rate, '[' .. edge, '(' .. key .. '\1',
      'BYLEX', 'LIMIT', at, 1)[1]
    local started = first and tonumber(string.sub(first, #key + 2, #key + 16)) or now
    return started + action.flow_rate_per_ms
  end
  return nil
end

-- A start of key `key` was taken by this call (flow_wait_until counts it).
local function flow_rate_taken(counts, key)
  if counts.in_window and counts.in_window[key] then
    counts.in_window[key] = counts.in_window[key] + 1
  end
end

-- Put ready run `run_id` (its record `run`, out of `pending` by the caller) off until
-- `until_ms`: it waits in `delayed`, and is placed again when due.
local function flow_defer(k, run_id, run, until_ms)
  run.rd = until_ms
  record_save(k.runs, run_id, run)
  redis.call('ZADD', k.delayed, string.format('%d', until_ms), run_id)
end

-- Move held entries `entries` of `flow_held` back to their places in `pending` while
-- their runs still wait (PENDING) and `room` (a number, or nil: no limit) lasts; drop
-- those whose runs no longer wait (cancelled, deleted). Returns how many went back.
local function flow_unhold(k, entries, room_of)
  local back = 0
  for _, entry in ipairs(entries) do
    local key, hex, run_id = string.match(entry, '^(.*)%z(%x+)%z(.*)$')
    local run = run_id and run_load(k.runs, run_id)
    if not run or run.s ~= RUN_PENDING then
      redis.call('ZREM', k.flow_held, entry)
    elseif room_of(key) then
      redis.call('ZREM', k.flow_held, entry)
      redis.call('ZADD', k.pending, string.format('%d', tonumber(hex, 16)), run_id)
      back = back + 1
    end
  end
  -- One wake-up per script call, however many keys it freed.
  if back > 0 and k.wake and not k.flow_woken then
    redis.call('SPUBLISH', k.wake, '1')
    k.flow_woken = true
  end
  return back
end

-- `n` runs of key `key` stopped running (they ended, went back to wait, were taken
-- back): their slots are free, and as many of the first runs their key holds back that
-- still wait go back to their places in `pending`, with a wake-up. `held`: false when
-- the caller knows nothing can be held (an action without a per-key limit: the reaper's
-- walk puts back what a limit since lifted left). Without `k.flows` (a script that
-- never ends a keyed run) nothing.
local function flow_release(k, key, n, held)
  if not key or not k.flows then return end
  n = n or 1
  local field = flow_field(key)
  if redis.call('HINCRBY', k.flows, field, -n) <= 0 then redis.call('HDEL', k.flows, field) end
  if held == false then return end
  local entries = redis.call('ZRANGE', k.flow_held, '[' .. key .. '\0', '(' .. key .. '\1',
    'BYLEX', 'LIMIT', 0, FLOW.HELD_SCAN)
  if #entries == 0 then return end
  local freed = n
  flow_unhold(k, entries, function()
    freed = freed - 1
    return freed >= 0
  end)
end

-- Pause key `key` until `until_ms` (a handler raised RateLimited): its runs are put off
-- until then by the claims that meet them. The later pause wins.
local function flow_pause(k, key, until_ms)
  local field = 'p:' .. key
  local pause = tonumber(redis.call('HGET', k.flows, field))
  if not pause or pause < until_ms then
    redis.call('HSET', k.flows, field, string.format('%d', until_ms))
  end
end

-- The next `n` entries of the byte-ordered set `set_key` after the cursor kept in meta
-- field `field`, which moves past them (back to the start after the last): a walk of
-- the whole set, a batch a call, in the reaper.
local function flow_walk_batch(k, set_key, field, n)
  local cursor = redis.call('HGET', k.meta, field) or ''
  local low = cursor == '' and '-' or '(' .. cursor
  local batch = redis.call('ZRANGE', set_key, low, '+', 'BYLEX', 'LIMIT', 0, n)
  if #batch < n then
    redis.call('HDEL', k.meta, field)
  else
    redis.call('HSET', k.meta, field, batch[#batch])
  end
  return batch
end

-- Forget a batch of starts that left every key's window (`flow_rate`, walked with the
-- cursor meta `flow_rate_at`), and pauses that ended: what an idle key leaves behind.
local function flow_rate_sweep(k, action, now)
  if not k.flow_rate or redis.call('EXISTS', k.flow_rate) == 0 then return end
  local batch = flow_walk_batch(k, k.flow_rate, 'flow_rate_at', FLOW.SWEEP)
  local old, n_old = {}, 0
  for _, entry in ipairs(batch) do
    local at = tonumber(string.match(entry, '%z(%d+)%z%d+$'))
    if not at or at <= now - action.flow_rate_per_ms then
      n_old = n_old + 1
      old[n_old] = entry
    end
  end
  if n_old > 0 then redis.call('ZREM', k.flow_rate, unpack(old)) end
end

-- Walk `flow_held` a batch at a time (cursor: meta `flow_at`): runs no longer waiting
-- are dropped, and those whose key is below `limit` (0: none) go back to `pending`.
-- A net under flow_release, so no run stays held once its key has room.
local function flow_walk(k, limit)
  if redis.call('EXISTS', k.flow_held) == 0 then return end
  local batch = flow_walk_batch(k, k.flow_held, 'flow_at', FLOW.HELD_SCAN)
  local counts = flow_counts(k, limit)
  flow_unhold(k, batch, function(key)
    if flow_full(counts, key) then return false end
    flow_taken(counts, key)
    return true
  end)
end

-- The settings an invoke of flow key `key` needs: {step = its step in virtual time
-- when the action is fair (flow_fair 1; the key's weight `fw:<key>` divides
-- FLOW.STEP), else nil; limit = the action's flow_concurrency; flow_rate_max and
-- flow_rate_per_ms, as the action's settings name them}, or false when a setting does
-- not parse. Read only for an invoke that names a key.
local function flow_settings(def_key, key)
  local v = redis.call('HMGET', def_key, 'flow_fair', 'fw:' .. key, 'flow_concurrency',
    'flow_rate_max', 'flow_rate_per_ms')
  local fair = arg_int(v[1] or '0', 0, 1)
  local weight = arg_int(v[2] or '1', 1, FLOW.STEP)
  local limit = arg_int(v[3] or '0', 0, U32_MAX)
  local rate_max = arg_int(v[4] or '0', 0, 10000)
  local rate_per_ms = arg_int(v[5] or '0', 0, 86400000)
  if not fair or not weight or not limit or not rate_max or not rate_per_ms then return false end
  local flow = {limit = limit, flow_rate_max = rate_max, flow_rate_per_ms = rate_per_ms}
  if fair == 1 then flow.step = math.floor(FLOW.STEP / weight) end
  return flow
end

-- An action's one-run-per-key mode (`flow_once`: FLOW.DEDUP, FLOW.THROTTLE or
-- FLOW.DEBOUNCE; 0: none) and its time (`flow_once_ms`: the dedup's time kept after the
-- run ended, the throttle's window, the debounce's wait), or false when either does not
-- parse.
local function flow_once_settings(def_key)
  local v = redis.call('HMGET', def_key, 'flow_once', 'flow_once_ms')
  local mode = arg_int(v[1] or '0', 0, FLOW.DEBOUNCE)
  local ms = arg_int(v[2] or '0', 0, 86400000)
  if not mode or not ms then return false end
  return mode, ms
end

-- The run an invoke of key `key` (input `input`) is answered with instead of a new
-- one, under the action's mode `mode` and its time `ms` (flow_once_settings), or nil:
-- dedup: the key's last run while it waits or runs, or ended less than `ms` ago;
-- throttle: the key's last run while its window (`ms` from its invoke) lasts;
-- debounce: the key's last run while it still waits for its start, which takes this
-- input and starts `ms` from now instead.
local function flow_once_existing(k, mode, ms, key, input, now)
  local run_id = redis.call('HGET', k.flows, 'o:' .. key)
  local run = run_id and run_load(k.runs, run_id)
  if not run then return nil end
  if mode == FLOW.DEDUP then
    if run.s == RUN_PENDING or run.s == RUN_RUNNING or (run.ct and run.ct + ms > now) then
      return run_id
    end
  elseif mode == FLOW.THROTTLE then
    local until_ms = tonumber(redis.call('ZSCORE', k.flow_once, key))
    if until_ms and until_ms > now then return run_id end
  elseif run.s == RUN_PENDING and redis.call('ZSCORE', k.delayed, run_id) then
    run.rd = now + ms
    record_save(k.runs, run_id, run)
    redis.call('HSET', k.inputs, run_id, input)
    redis.call('ZADD', k.delayed, string.format('%d', run.rd), run_id)
    redis.call('ZADD', k.flow_once, string.format('%d', run.rd), key)
    return run_id
  end
  return nil
end

-- Run `run_id` is key `key`'s last run (mode `mode`, time `ms`; it is due at `due`):
-- remembered for the invokes after it, until the reaper's flow_once_sweep finds it done.
local function flow_once_record(k, mode, ms, key, run_id, now, due)
  redis.call('HSET', k.flows, 'o:' .. key, run_id)
  local until_ms = now + ms
  if mode == FLOW.DEBOUNCE then until_ms = due end
  if mode == FLOW.DEDUP then until_ms = now + FLOW.ONCE_RECHECK_MS end
  redis.call('ZADD', k.flow_once, string.format('%d', until_ms), key)
end

-- Forget the keys' last runs that no invoke can be answered with any more (a batch of
-- those due in `flow_once`): a throttle's window over, a debounced run started, a
-- deduplicated run ended `ms` ago (one still live is looked at again later).
local function flow_once_sweep(k, now)
  if not k.flow_once or redis.call('EXISTS', k.flow_once) == 0 then return end
  local due = redis.call('ZRANGE', k.flow_once, '-inf', now, 'BYSCORE', 'LIMIT', 0, FLOW.SWEEP)
  if #due == 0 then return end
  local mode, ms = flow_once_settings(k.definition)
  for _, key in ipairs(due) do
    local field = 'o:' .. key
    local run_id = redis.call('HGET', k.flows, field)
    local run = run_id and run_load(k.runs, run_id)
    local again = nil
    if run and mode == FLOW.DEDUP then
      if run.s == RUN_PENDING or run.s == RUN_RUNNING then
        again = now + FLOW.ONCE_RECHECK_MS
      elseif run.ct and run.ct + ms > now then
        again = run.ct + ms
      end
    end
    if again then
      redis.call('ZADD', k.flow_once, string.format('%d', again), key)
    else
      redis.call('ZREM', k.flow_once, key)
      if run_id then redis.call('HDEL', k.flows, field) end
    end
  end
end
