--[[ action_claim
  Hand up to max_n ready runs to one worker: each becomes RUNNING under a lease with a new
  fencing token. First (bounded) it takes back expired leases and promotes due delayed runs;
  what of those it does not take goes to other parked pollers, else wakes pollers.
  A retried poll (same poll id) gets back what that poll was handed and still holds, not
  new runs. A poll that finds nothing may park its poller for a hand-off (lib/handoff.lua);
  any claim of a poller ends its park. A run offered to the poller by a hand-off that this
  claim answers with, or that it names as received, is accepted (lib/offer.lua).
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters (token: fencing tokens, qseq: queue order)
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] pending  ZSET  run_id -> queue order
  KEYS[6] delayed  ZSET  run_id -> due ms
  KEYS[7] leases   ZSET  run_id -> lease deadline ms
  KEYS[8] failed   ZSET  run_id -> finished ms
  KEYS[9] polls    HASH  poll id -> msgpack {run ids, tokens} handed to that poll
  KEYS[10] poll_times  ZSET  poll id -> time ms (memos are forgotten after two minutes)
  KEYS[11] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[12] owned   ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[13] ended   CHANNEL  sharded channel told the ids of runs that end (client.action.wait)
  KEYS[14] rate    ZSET  token -> start ms: the action's starts within its rate window
  KEYS[15] parked  ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[16] handoff CHANNEL  the caller's hand-off channel in this queue (lib/handoff.lua);
                            refused (OUT_OF_RANGE) unless exactly the owner's hand-off
                            channel in this queue's slot (lib/channels.lua)
  KEYS[17] wake    CHANNEL  sharded channel announcing new work
  KEYS[18] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[19] history STRING  runs per minute over 72 hours (lib/history.lua)
  KEYS[20] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[21] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[22] flow_vt ZSET  flow key -> virtual time of its last run placed fairly (lib/flow.lua)
  KEYS[23] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  KEYS[24] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  KEYS[25] nudge   CHANNEL  sharded channel telling forwarders the outbox has a message (lib/graph.lua)
  KEYS[26] graph    HASH  dependency states, groups' records (lib/graph.lua)
  ARGV[1] worker_id
  ARGV[2] owner       the worker process's owner id
  ARGV[3] labels      msgpack map of the worker's type-tagged labels, or ''
  ARGV[4] max_n       how many runs the worker can take now, 0 .. 2^32 - 1 (0: only end
                      the poller's park and answer with what was handed to it)
  ARGV[5] poll_id     '' or an id the caller reuses when it retries this poll
  ARGV[6] scan        pending runs inspected per window (label routing, runs held
                      back by their flow key's limit: lib/flow.lua), 1 .. 1000; at
                      most two windows: the head, and one at a cursor that moves past runs
                      no worker asking took (meta field scan_at)
  ARGV[7] park_ms     when nothing is handed to a "<poller>#<n>" poll, park the poller
                      for this long (0 .. 60000; 0: do not park)
  ARGV[8] received    "<run id> <token>" of the run this poller received here last (by
                      hand-off for its previous poll), or '' (a run handed to that poll
                      and not received -- another run, or the same run under another
                      token: a retry, a release -- is part
                      of this poll's answer; the one received is accepted)
  ARGV[9] offer_ms    a park's offer window, at most 60000: a run handed to it must be
                      accepted within this long, or it goes back (0: handed outright)
  Returns {status, next_due_ms, n, (run_id, token, attempt, created_ms, ready_ms,
          claimed_ms, input, trace) * n, rate_next_ms, (kind, field, why) * m}
          status: OK | NO_ACTION | BAD_SETTING (the action's stored settings do not
          parse) | OUT_OF_RANGE (a hand-off
          channel not the owner's); next_due_ms: when a delayed run becomes ready or a
          lease expires, whichever is first, or -1; ready_ms: when the run became ready
          to claim; claimed_ms: when it was handed out (claimed - ready = pickup latency);
          rate_next_ms: when runs wait only for the rate limit, the server time its next
          start is allowed, else -1; trace: the run's trace context (field tr) or '';
          then each record this call set aside because it does not decode (kind 'run',
          field its run id, why)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/labels.lua
--@include lib/owners.lua
--@include lib/polls.lua
--@include lib/handoff.lua
--@include lib/checked.lua
--@include lib/offer.lua
--@include lib/flow.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  pending = KEYS[5], delayed = KEYS[6], leases = KEYS[7], failed = KEYS[8],
  polls = KEYS[9], poll_times = KEYS[10], owners = KEYS[11], owned = KEYS[12],
  ended = ended_channel(KEYS[13]), rate = KEYS[14], parked = KEYS[15], handoff = KEYS[16],
  wake = KEYS[17], quarantine = KEYS[18], history = KEYS[19],
  flows = KEYS[20], flow_held = KEYS[21], flow_vt = KEYS[22], flow_rate = KEYS[23],
  aside = {}, noted = {}, outbox = KEYS[24], nudge = KEYS[25], graph = KEYS[26]}
local worker_id = ARGV[1]
local owner = ARGV[2]
local labels = ARGV[3]
local max_n = arg_int(ARGV[4], 0, U32_MAX)
local poll_id = ARGV[5]
local scan = arg_int(ARGV[6], 1, 1000)
local park_ms = arg_int(ARGV[7], 0, PARK_MAX_MS)
local received = ARGV[8]
local offer_ms = arg_int(ARGV[9], 0, PARK_MAX_MS)
local BATCH = 100

if owner == '' then return {ST_BAD_ARG, 2} end
local worker_labels = nil
if labels ~= '' then
  worker_labels = arg_map(labels)
  if not worker_labels then return {ST_BAD_ARG, 3} end
end
if not max_n then return {ST_BAD_ARG, 4} end
if not scan then return {ST_BAD_ARG, 6} end
if not park_ms then return {ST_BAD_ARG, 7} end
if not channel_of(k.handoff, HANDOFF_CHANNEL, k.runs, owner) then return {ST_OUT_OF_RANGE} end
if not offer_ms then return {ST_BAD_ARG, 9} end
local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
if action.bad then return {ST_BAD_SETTING} end
local now = now_ms()
local out = {ST_OK, -1, 0}
local poller = poll_field(poll_id)
if poller ~= poll_id then handoff_unpark(k.parked, poller, now) end


local out_n = #out  -- out's length, kept here: # is a search each time
local function hand_out(run_id, run, input)
  out[3] = out[3] + 1
  out[out_n + 1] = run_id
  out[out_n + 2] = run.t
  out[out_n + 3] = run.a
  out[out_n + 4] = run.c
  out[out_n + 5] = run.rd or run.c
  out[out_n + 6] = run.st
  out[out_n + 7] = input or ''
  out[out_n + 8] = run.tr or ''
  out_n = out_n + 8
end

-- The record of run_id if it is still ours under `token` (nil: it is not).
local function held(run_id, token)
  local run = run_load(k.runs, run_id)
  if run and run.s == RUN_RUNNING and run.t == token and run.o == owner then return run end
  return nil
end

-- Accept run_id under `token` if it is still ours and offered (lib/offer.lua).
local function accept_held(run_id, token)
  local run = held(run_id, token)
  if run and offer_accept(k.leases, run_id, run) then record_save(k.runs, run_id, run) end
  return run
end

-- Hand out again run_id under `token` if it is still ours (accepted, if it was offered);
-- true if it was.
local function hand_out_held(run_id, token)
  local run = accept_held(run_id, token)
  if not run then return false end
  hand_out(run_id, run, redis.call('HGET', k.inputs, run_id))
  return true
end

-- A retried poll: answer with what this poll id was handed, where still held by us.
-- When none of it is held any more (finished, or taken back), claim afresh.
local replayed = poll_replay(k.polls, k.poll_times, poll_id, now, hand_out_held)
if replayed > 0 then
  out[2] = queue_next_event(k.delayed, k.leases)
  out[out_n + 1] = -1
  return out
end

local ready = queue_expire(k, now, BATCH, action.backoff_ms, action.backoff_max_ms)
ready = ready + queue_promote(k, now, BATCH)

local memo = poll_memo()
-- A run handed to the poller's previous poll that it did not receive: ours to answer with;
-- the one it received: accepted.
if poller ~= poll_id then
  handoff_unseen(k.polls, k.poll_times, poller, poll_id, received, now, function(run_id, token)
    if hand_out_held(run_id, token) then poll_memo_add(memo, run_id, token) end
  end, accept_held)
end

local unseen = out[3]
local n, rate_room = queue_room(k, action, now, max_n)
if n > out[3] then
  local want = n - out[3]
  local ids, runs, dropped, bad = {}, {}, {}, {}
  local taken, n_dropped = 0, 0  -- #ids, #dropped
  local flows = flow_counts(k, action.flow_concurrency)
  -- Take from `candidates` (pending run ids, in queue order) the runs this worker may
  -- run, until `want` are taken: their records read a slice at a time; the runs taken
  -- and those no longer pending are noted in `dropped`, to leave `pending` in one call,
  -- and those whose records the scripts cannot use in `bad` (run id, bytes, why), to be
  -- set aside with them.
  local function take(candidates)
    local from, last = 1, #candidates
    while from <= last and taken < want do
      local to = math.min(last, from + want - taken - 1)
      local raws = redis.call('HMGET', k.runs, unpack(candidates, from, to))
      local decoded, whys = run_decode_all(raws)
      for i = from, to do
        local j = i - from + 1
        local run_id, run, why = candidates[i], decoded[j], whys and whys[j]
        if why then
          local n_bad = #bad
          bad[n_bad + 1], bad[n_bad + 2], bad[n_bad + 3] = run_id, raws[j], why
        elseif not run or run.s ~= RUN_PENDING then
          n_dropped = n_dropped + 1
          dropped[n_dropped] = run_id
        elseif run.lb == nil or labels_match(run.lb, worker_labels) then
          n_dropped = n_dropped + 1
          dropped[n_dropped] = run_id
          local key = run.fk
          local full = key and flow_full(flows, key)
          local wait = key and not full and flow_wait_until(flows, action, key, now)
          if full then
            flow_hold(k, run_id, run)  -- its key is at its limit: held, not in the way
          elseif wait then
            flow_defer(k, run_id, run, wait)  -- its key's window is full, or paused
          else
            if key then
              flow_taken(flows, key)
              flow_rate_taken(flows, key)
            end
            taken = taken + 1
            ids[taken] = run_id
            runs[taken] = run
          end
        end
      end
      from = to + 1
    end
  end
  local function drop()
    if n_dropped > 0 then redis.call('ZREM', k.pending, unpack(dropped, 1, n_dropped)) end
    dropped, n_dropped = {}, 0
    for j = 1, #bad, 3 do run_aside(k, bad[j], bad[j + 1], bad[j + 2]) end
    bad = {}
  end
  -- The head of the queue first, `scan` runs at most: as many as wanted, then, when
  -- some of those could not be taken, the rest of the head (nothing leaves `pending`
  -- until the head is done, so positions hold). When the head is full of runs whose
  -- labels this worker lacks, one more window further on, at a cursor that moves on each
  -- such call (wrapping), so a run behind many others' runs is reached in bounded steps,
  -- never blocked for good.
  local looked = 0
  while taken < want and looked < scan do
    local asked = looked == 0 and math.min(scan, want) or scan - looked
    local head = redis.call('ZRANGE', k.pending, looked, looked + asked - 1)
    looked = looked + #head
    take(head)
    if #head < asked then break end
  end
  drop()
  if taken < want and looked == scan then
    local at = tonumber(redis.call('HGET', k.meta, 'scan_at')) or scan
    local further = redis.call('ZRANGE', k.pending, at, at + scan - 1)
    if #further == 0 then
      redis.call('HSET', k.meta, 'scan_at', scan)
    else
      take(further)
      drop()
      redis.call('HSET', k.meta, 'scan_at', at + scan)
    end
  end
  if taken > 0 then
    k.flow_log = action.flow_rate_max > 0
    queue_take_many(k, ids, runs, worker_id, owner, now, queue_lease_deadline(action, now),
      rate_room ~= nil)
    local inputs = redis.call('HMGET', k.inputs, unpack(ids))
    for i = 1, taken do
      local run_id, run = ids[i], runs[i]
      poll_memo_add(memo, run_id, run.t)
      hand_out(run_id, run, inputs[i])
    end
  end
end

-- Runs this claim made ready and did not take: other parked pollers' (the caller's park
-- ended above), else a wake-up, so none waits for a poller that does not know of it.
if ready > 0 then handoff_ready(k, action, now, ready) end
if #memo.ids > 0 then
  -- The reclaim asks about every owner listed here (lib/owners.lua).
  redis.call('HSETNX', k.owners, owner, 0)
end
poll_remember(k.polls, k.poll_times, poll_id, memo, now)
if out[3] == 0 and park_ms > 0 and poller ~= poll_id then
  handoff_park(k, poller, poll_id, owner, worker_id, labels, k.handoff, now, park_ms, offer_ms)
end
out[2] = queue_next_event(k.delayed, k.leases)
-- Held back by the rate limit with runs still waiting: say when the next start is allowed,
-- when the start whose leaving makes room (the oldest, unless the limit was lowered)
-- leaves the window.
local rate_next = -1
if rate_room and out[3] - unseen >= rate_room and redis.call('ZCARD', k.pending) > 0 then
  local at = math.max(redis.call('ZCARD', k.rate) - action.rate_max, 0)
  local leaving = redis.call('ZRANGE', k.rate, at, at, 'WITHSCORES')
  if #leaving > 0 then rate_next = tonumber(leaving[2]) + action.rate_per_ms end
end
out[out_n + 1] = rate_next
for i, v in ipairs(k.aside) do out[out_n + 1 + i] = v end
return out
