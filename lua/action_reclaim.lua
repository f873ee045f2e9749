--[[ action_reclaim
  Take back the runs of owners whose worker process is gone. For each named owner the
  subscriber count of its liveness channel decides: with a subscriber it is alive (a
  suspicion is cleared); without one it is suspected the first time it is seen absent, and
  judged gone once it stayed absent for grace_ms. Of a gone owner, exactly the runs whose
  record names it as owner are taken back: each keeps the attempt it spent and waits again
  (after the action's backoff), or ends FAILED on its last attempt, with the error
  'owner gone: worker process died' (runs ready again go to parked pollers from the head
  of the queue: lib/handoff.lua). A frozen owner keeps its subscription, so only its
  lease deadlines apply to it. A run only offered to a gone owner (a hand-off it did
  not accept: lib/offer.lua) goes back to its place in the queue, its attempt not spent.
  First it takes back expired leases and offers not accepted in their window
  (queue_expire, at most `batch`), so a frozen poller's offer comes back within a reaper
  round, not at the next upkeep. Also drops a few index entries of runs no longer held.
  At most `batch` index entries of gone owners per call.
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters; stat:* fields are the queue's liveness statistics
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] pending  ZSET  run_id -> queue order
  KEYS[5] delayed  ZSET  run_id -> due ms
  KEYS[6] leases   ZSET  run_id -> lease deadline ms
  KEYS[7] failed   ZSET  run_id -> finished ms
  KEYS[8] owners   HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[9] owned    ZSET  "<owner>\0<run_id>" (score 0): the runs handed to each owner
  KEYS[10] wake    CHANNEL  sharded channel announcing new work
  KEYS[11] ended   CHANNEL  sharded channel told the ids of runs that end (client.action.wait)
  KEYS[12] inputs  HASH  run_id -> input bytes
  KEYS[13] parked  ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[14] polls   HASH  poll memos; a parked poller's park rides in its memo
  KEYS[15] poll_times  ZSET  poll memo -> time ms
  KEYS[16] rate    ZSET  token -> start ms: the action's starts within its rate window
  KEYS[17] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[18] history STRING  runs per minute over 72 hours (lib/history.lua)
  KEYS[19] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[20] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[21] flow_vt ZSET  flow key -> virtual time of its last run placed fairly (lib/flow.lua)
  KEYS[22] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  KEYS[23] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  KEYS[24] nudge   CHANNEL  sharded channel telling forwarders the outbox has a message (lib/graph.lua)
  KEYS[25] graph    HASH  dependency states, groups' records (lib/graph.lua)
  KEYS[26..n] channels  CHANNEL  the liveness channel of each owner named in ARGV[3],
                        in the same order
  ARGV[1] grace_ms  how long an owner must stay absent before it is judged gone
                    (0 .. 2^32 - 1)
  ARGV[2] batch     at most this many index entries of gone owners (1..1000)
  ARGV[3] owners    msgpack array of owner ids (at most 100)
  Returns {status, reclaimed, wait_ms, more, (kind, field, why) * m}
          status: OK | NO_ACTION | OUT_OF_RANGE (also: a channel that is not exactly
          its owner's liveness channel in this queue's slot, lib/channels.lua);
          reclaimed: runs taken back; wait_ms: when
          the earliest suspect's grace ends (-1: no suspect); more: 1 if the batch ran out;
          then each record this call set aside because it does not decode (kind 'run',
          field its run id, why)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/owners.lua
--@include lib/handoff.lua
--@include lib/checked.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], pending = KEYS[4],
  delayed = KEYS[5], leases = KEYS[6], failed = KEYS[7], owners = KEYS[8], owned = KEYS[9],
  wake = KEYS[10], ended = ended_channel(KEYS[11]), inputs = KEYS[12], parked = KEYS[13],
  polls = KEYS[14], poll_times = KEYS[15], rate = KEYS[16], quarantine = KEYS[17],
  history = KEYS[18], flows = KEYS[19], flow_held = KEYS[20], flow_vt = KEYS[21],
  flow_rate = KEYS[22], aside = {}, noted = {}, outbox = KEYS[23], nudge = KEYS[24], graph = KEYS[25]}
local channels = {}
for i = 26, #KEYS do channels[#channels + 1] = KEYS[i] end
local grace_ms = arg_int(ARGV[1], 0, U32_MAX)
local batch = arg_int(ARGV[2], 1, RECLAIM_MAX_BATCH)
local owners = arg_names(ARGV[3], RECLAIM_MAX_OWNERS)
local GC_BATCH = 20
local GONE = 'owner gone: worker process died'

if not grace_ms then return {ST_BAD_ARG, 1} end
if not batch then return {ST_BAD_ARG, 2} end
if not owners then return {ST_BAD_ARG, 3} end

if reclaim_refused(grace_ms, batch, owners, channels, k.owners) then return {ST_OUT_OF_RANGE} end
local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local now = now_ms()
local ready = queue_expire(k, now, batch, action.backoff_ms, action.backoff_max_ms)
local reclaimed, budget = 0, {left = batch}

-- Take back what `owner` holds, up to the budget; true once nothing of it is left.
local function take_back(owner)
  return owned_take_back(k.owned, owner, budget, function(run_id)
    local run, why, raw = run_load(k.runs, run_id)
    if run == false then
      run_aside(k, run_id, raw, why)
    elseif run and run.s == RUN_RUNNING and run.o == owner then
      redis.call('ZREM', k.leases, run_id)
      reclaimed = reclaimed + 1
      if offer_free(run) then
        queue_unoffer(k, run_id, run)  -- only offered: back to its place, unspent
        ready = ready + 1
      else
        run.err = GONE
        run.tb = nil
        if run.a < run.mr then
          ready = ready + queue_retry(k, run_id, run, now, action.backoff_ms,
            action.backoff_max_ms)
        else
          queue_bury(k, run_id, run, now, RUN_FAILED)
        end
      end
    end
  end)
end

local judged = owners_judge(k.owners, owners, channels, now, grace_ms, take_back)
tally_save(k, now)

-- Index entries of runs their owner no longer holds (finished, expired, taken back) are
-- dropped a few per call, walking the index with a cursor kept in meta.
local cursor = redis.call('HGET', k.meta, 'owned_gc') or ''
local low = '-'
if cursor ~= '' then low = '(' .. cursor end
local entries = redis.call('ZRANGE', k.owned, low, '+', 'BYLEX', 'LIMIT', 0, GC_BATCH)
for _, entry in ipairs(entries) do
  local owner, run_id = owned_split(entry)
  local run = run_id and run_load(k.runs, run_id)
  if not run or run.s ~= RUN_RUNNING or run.o ~= owner then
    redis.call('ZREM', k.owned, entry)
  end
end
if #entries < GC_BATCH then
  redis.call('HDEL', k.meta, 'owned_gc')
else
  redis.call('HSET', k.meta, 'owned_gc', entries[#entries])
end

if reclaimed > 0 then redis.call('HINCRBY', k.meta, 'stat:reclaimed_owner_gone', reclaimed) end
if judged.suspected > 0 then
  redis.call('HINCRBY', k.meta, 'stat:owners_suspected', judged.suspected)
end
if judged.cleared > 0 then
  redis.call('HINCRBY', k.meta, 'stat:suspicions_cleared', judged.cleared)
end
if judged.gone > 0 then redis.call('HINCRBY', k.meta, 'stat:owners_gone', judged.gone) end
if ready > 0 then handoff_ready(k, action, now, ready) end
local out = {ST_OK, reclaimed, judged.wait, judged.more}
for i, v in ipairs(k.aside) do out[4 + i] = v end
return out
