--[[ lib/handoff
  Hand-off (lua/README.md, "Hand-off"): a poller whose claim found nothing parks in the
  queue, and a script that makes a run ready gives it straight to a parked poller, with
  everything a claim records (lease, fencing token, owner, a poll memo under the poller's
  poll id), then publishes it on the poller's hand-off channel. Pickup is that one message.
  `parked` ZSET: poller -> park deadline ms. The park rides in the poller's poll memo
  (lib/polls.lua) as `k = {o owner, w worker id, lb packed labels or '', ch channel,
  ow offer window ms}`; the hand-off replaces it by the handed run, marked `h = 1`. A
  park takes one run; the poller's next claim ends it, and answers with a run handed to
  an earlier poll of the poller that the poller says it did not receive, or accepts the
  one it says it received.
  A hand-off is an offer (lib/offer.lua): the run's lease ends when the poller's offer
  window does, unless the poller accepts it; else it goes back to its place, unspent. A
  park without a window (a poller of a version before offers, which never accepts) is
  handed the run with its whole lease, as before.
]]
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/labels.lua
--@include lib/polls.lua
--@include lib/ids.lua
--@include lib/offer.lua
--@include lib/flow.lua

-- A park lasts at most this long; the poller claims again by then.
local PARK_MAX_MS = 60000
-- Parked pollers one hand-off looks at (skipping those whose labels do not match).
local HANDOFF_SCAN = 8
-- A larger input is not sent in the message: the poller's claim replays the run with it.
local HANDOFF_INPUT_MAX = 65536
-- Runs one script hands from the head of the queue at most (about 25 µs each); the rest
-- wait, announced by a wake-up.
local HANDOFF_BATCH = 100
-- Expired parks (of pollers that went away) a claim forgets at most.
local PARK_FORGET_BATCH = 100
-- Parks one unpark call looks at.
local PARK_SCAN_MAX = 1000
-- The msgpack bytes of a memo's `h = 1` (key "h", then the integer 1), which a hand-off's
-- memo holds and a claim's does not.
local HANDOFF_MARK = '\161h\1'

-- Park poller `field` (its poll `poll_id`) for park_ms (at most PARK_MAX_MS): the next run
-- made ready here that it may take is offered to it, to accept within offer_ms (a
-- positive window; 0: none, the run is handed outright), and told on `channel`.
local function handoff_park(k, field, poll_id, owner, worker_id, labels, channel, now, park_ms,
    offer_ms)
  if park_ms > PARK_MAX_MS then park_ms = PARK_MAX_MS end
  local park = {o = owner, w = worker_id, lb = labels, ch = channel}
  if offer_ms > 0 then park.ow = offer_ms end
  redis.call('HSET', k.polls, field, cmsgpack.pack({p = poll_id, ids = {}, tokens = {}, k = park}))
  redis.call('ZADD', k.poll_times, now, field)
  redis.call('ZADD', k.parked, now + park_ms, field)
end

-- End poller `field`'s park, if any, and forget a batch of parks past their deadline.
local function handoff_unpark(parked_key, field, now)
  redis.call('ZREM', parked_key, field)
  local old = redis.call('ZRANGE', parked_key, '-inf', now, 'BYSCORE', 'LIMIT', 0,
    PARK_FORGET_BATCH)
  if #old > 0 then redis.call('ZREM', parked_key, unpack(old)) end
end

-- The run handed to an earlier poll of poller `field` (not `poll_id`) that the poller did
-- not receive (`received`, "<run id> <token>", names the one it did; the same run handed
-- again under a new token, a retry or a release, is not that one): each(run_id, token);
-- the one it did receive: got(run_id, token).
local function handoff_unseen(polls_key, times_key, field, poll_id, received, now, each, got)
  local raw = redis.call('HGET', polls_key, field)
  -- Only a hand-off's memo (h = 1, packed as the bytes a1 68 01) names a run to answer
  -- with: a claim's memo of many runs is not decoded to learn that it is none.
  if not raw or not string.find(raw, HANDOFF_MARK, 1, true) then return end
  local at = tonumber(redis.call('ZSCORE', times_key, field))
  if not at or at < now - POLL_MEMORY_MS then return end
  local memo = poll_memo_decode(raw)
  if not memo or memo.h ~= 1 or memo.p == poll_id then return end
  for i = 1, #memo.ids do
    if string.format('%s %d', memo.ids[i], memo.tokens[i]) ~= received then
      each(memo.ids[i], memo.tokens[i])
    else
      got(memo.ids[i], memo.tokens[i])
    end
  end
end

-- The park `memo` holds and its labels (nil: none), or nil when it holds none, or one
-- that does not decode (a poll memo that cannot be read is as none: lib/polls.lua).
local function handoff_park_of(memo)
  local park = memo and memo.k
  if type(park) ~= 'table' or type(park.o) ~= 'string' or type(park.ch) ~= 'string'
      or type(park.lb) ~= 'string' then
    return nil
  end
  if park.lb == '' then return park, nil end
  local labels = record_decode(park.lb)
  if not labels then return nil end
  return park, labels
end

-- The input of `run_id` for a hand-off message: false when larger than HANDOFF_INPUT_MAX
-- (the poller's claim answers with it).
local function handoff_input(inputs_key, run_id)
  if redis.call('HSTRLEN', inputs_key, run_id) > HANDOFF_INPUT_MAX then return false end
  return redis.call('HGET', inputs_key, run_id) or ''
end

-- Give ready run `run_id` (its record `run`, PENDING, not in `pending`; `input` its input,
-- or nil to read it) to a parked poller that may take it now: within max_concurrency and
-- the rate limit, a poller whose labels match, of another owner than `skip_owner` (nil:
-- any), within its flow key's concurrency and rate (lib/flow.lua), and whose hand-off
-- channel has a subscriber (one without, gone or reconnecting, loses its park: it claims
-- again when back). `fields`: the parked pollers to look at,
-- when the caller read them (nil: read here). `place`: the run's score in `pending` when
-- it was taken from there (nil: a new run, given a place if it is offered). True when
-- handed: the run is saved RUNNING, offered when the park states a window, and the
-- poller told.
local function handoff_give(k, action, run_id, run, input, now, skip_owner, fields, place)
  if action.bad then return false end  -- a claim refuses it too: nothing is leased
  fields = fields
    or redis.call('ZRANGE', k.parked, now, '+inf', 'BYSCORE', 'LIMIT', 0, HANDOFF_SCAN)
  if #fields == 0 then return false end
  local room, rate_room = queue_room(k, action, now, 1)
  if room < 1 then return false end
  if run.fk and k.flows then
    local counts = flow_counts(k, action.flow_concurrency)
    if flow_full(counts, run.fk) or (k.flow_rate and flow_wait_until(counts, action, run.fk, now))
    then
      return false
    end
    k.flow_log = action.flow_rate_max > 0
  end
  local sent = input
  for _, field in ipairs(fields) do
    local raw = redis.call('HGET', k.polls, field)
    local memo = raw and record_decode(raw)
    local park, labels = handoff_park_of(memo)
    if not park then
      redis.call('ZREM', k.parked, field)
    elseif park.o ~= skip_owner and labels_match(run.lb, labels) then
      redis.call('ZREM', k.parked, field)
      if sent == nil then
        sent = handoff_input(k.inputs, run_id)
      elseif sent and #sent > HANDOFF_INPUT_MAX then
        sent = false
      end
      -- The message goes first: how many heard it is the subscriber check. Nobody
      -- else sees the script half done, and a token skipped (nobody heard) is harmless.
      local token = ids_take(k.meta, 'token', 1, now)
      if redis.call('SPUBLISH', park.ch, cmsgpack.pack({memo.p, run_id, token, run.a + 1,
          run.c, run.rd or run.c, now, sent, run.tr or ''})) > 0 then
        local deadline = queue_lease_deadline(action, now)
        if park.ow then
          -- An offer (lib/offer.lua): the lease ends with the window unless accepted.
          run.of = deadline
          run.q = place or queue_place(k, run)
          if now + park.ow < deadline then deadline = now + park.ow end
        end
        queue_take(k, run_id, run, park.w, park.o, now, deadline, rate_room ~= nil, token)
        redis.call('HSETNX', k.owners, park.o, 0)
        redis.call('HSET', k.polls, field,
          cmsgpack.pack({p = memo.p, ids = {run_id}, tokens = {token}, h = 1}))
        redis.call('ZADD', k.poll_times, now, field)
        return true
      end
    end
  end
  return false
end

-- Give new run `run_id` (not yet queued nor saved) to a parked poller (handoff_give), only
-- while nothing waits in `pending`, so priority and FIFO order hold. `action` may hold
-- only the two settings an invoke reads first (`lean`, lib/action.lua): the rest is read
-- from `k.definition` once a poller is parked. False: the caller queues it as usual.
local function handoff_new(k, action, run_id, run, input, now)
  -- With nobody parked (a busy or absent worker) one ZCARD answers: a fifth of a ZRANGE.
  if redis.call('ZCARD', k.parked) == 0 then return false end
  local fields = redis.call('ZRANGE', k.parked, now, '+inf', 'BYSCORE', 'LIMIT', 0, HANDOFF_SCAN)
  if #fields == 0 or redis.call('ZCARD', k.pending) > 0 then return false end
  if action.lean then action = action_load(k.definition) end
  return handoff_give(k, action, run_id, run, input, now, nil, fields)
end

-- `n` runs (n > 0) were just queued in `pending`, ready now: hand the head of the queue to
-- parked pollers while one may take it (handoff_give, none of `skip_owner`'s; at most n
-- runs and HANDOFF_BATCH, never one past a run left waiting, so priority and FIFO order
-- hold), then publish a wake-up when runs still wait. Without `k.parked` it only wakes.
-- Returns how many runs were handed. Every script that makes runs ready calls this
-- (lib/invoke.lua hands a new run before queuing it, which comes to the same).
local function handoff_ready(k, action, now, n, skip_owner)
  local handed = 0
  if k.parked then
    for _ = 1, math.min(n, HANDOFF_BATCH) do
      if redis.call('ZCARD', k.parked) == 0 then break end
      local first = redis.call('ZRANGE', k.pending, 0, 0, 'WITHSCORES')
      local head = first[1]
      if not head then break end
      local run, why, raw = run_load(k.runs, head)
      if run == false then
        -- Not one the scripts can use: set aside where the script reports what it set
        -- aside, else left at the head for a claim to.
        if not k.aside then break end
        run_aside(k, head, raw, why)
      elseif run and run.s == RUN_PENDING then
        if not handoff_give(k, action, head, run, nil, now, skip_owner, nil, tonumber(first[2]))
        then
          break
        end
        handed = handed + 1
      end
      redis.call('ZREM', k.pending, head)
    end
  end
  if redis.call('ZCARD', k.pending) > 0 then redis.call('SPUBLISH', k.wake, '1') end
  return handed
end

-- Run `run_id` was just put in `delayed`. A parked poller sleeps until the earliest due
-- time its last claim answered, so when this run is due before every other, wake the
-- parked pollers: each claims once and learns the new time, and the run is picked up
-- when it falls due rather than at the next upkeep (up to a second later).
local function handoff_delayed(k, run_id)
  if k.parked and redis.call('ZCARD', k.parked) > 0
      and redis.call('ZRANGE', k.delayed, 0, 0)[1] == run_id then
    redis.call('SPUBLISH', k.wake, '1')
  end
end

-- End the parks of worker `worker_id`'s pollers (at most PARK_SCAN_MAX parks looked at)
-- and tell each poller, by a message naming only its poll id, to look again. Returns
-- how many were ended.
local function handoff_unpark_worker(k, worker_id)
  local ended = 0
  for _, field in ipairs(redis.call('ZRANGE', k.parked, 0, PARK_SCAN_MAX - 1)) do
    local raw = redis.call('HGET', k.polls, field)
    local memo = raw and record_decode(raw)
    if memo and handoff_park_of(memo) and memo.k.w == worker_id then
      redis.call('ZREM', k.parked, field)
      redis.call('HDEL', k.polls, field)
      redis.call('ZREM', k.poll_times, field)
      redis.call('SPUBLISH', memo.k.ch, cmsgpack.pack({memo.p}))
      ended = ended + 1
    end
  end
  return ended
end
