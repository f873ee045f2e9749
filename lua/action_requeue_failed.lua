--[[ action_requeue_failed
  Re-queue up to `batch` of an action's FAILED, TIMED_OUT and CANCELLED runs, oldest
  first, each for a fresh set of attempts (as run_requeue; parked pollers are handed the
  head of the queue: lib/handoff.lua). Called repeatedly with the
  `upto` of the first call, it re-queues every run that had failed when the first call
  ran, and never one that failed again since, so the loop ends.
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters (qseq: queue order)
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] pending  ZSET  run_id -> queue order
  KEYS[5] failed   ZSET  run_id -> finished ms
  KEYS[6] wake     CHANNEL  sharded channel announcing new work
  KEYS[7] inputs   HASH  run_id -> input bytes
  KEYS[8] leases   ZSET  run_id -> lease deadline ms
  KEYS[9] owned    ZSET  "<owner>\0<run_id>": the runs each owner holds
  KEYS[10] parked  ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[11] polls   HASH  poll memos; a parked poller's park rides in its memo
  KEYS[12] poll_times  ZSET  poll memo -> time ms
  KEYS[13] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[14] rate    ZSET  token -> start ms: the action's starts within its rate window
  KEYS[15] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[16] flows   HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[17] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  ARGV[1] upto     re-queue runs that failed at or before this ms (0 .. 2^53); '' = the
                   newest now
  ARGV[2] batch    1 .. 500
  Returns {status, requeued, remaining, upto, (kind, field, why) * m}   status: OK |
          NO_ACTION; remaining: failed runs left at or before upto; then each record this
          call set aside because it does not decode (kind 'run', field its run id, why)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/handoff.lua
--@include lib/checked.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], pending = KEYS[4],
  failed = KEYS[5], wake = KEYS[6], inputs = KEYS[7], leases = KEYS[8], owned = KEYS[9],
  parked = KEYS[10], polls = KEYS[11], poll_times = KEYS[12], owners = KEYS[13], rate = KEYS[14],
  quarantine = KEYS[15], flows = KEYS[16], flow_rate = KEYS[17], aside = {}}
local MAX_BATCH = 500
local upto = arg_int_or_none(ARGV[1], 0, INT_MAX)
local batch = arg_int(ARGV[2], 1, MAX_BATCH)

if upto == nil then return {ST_BAD_ARG, 1} end
if not batch then return {ST_BAD_ARG, 2} end
local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
if upto then
  upto = string.format('%d', upto)
else
  local last = redis.call('ZRANGE', k.failed, -1, -1, 'WITHSCORES')
  if #last == 0 then return {ST_OK, 0, 0, '-inf'} end
  upto = last[2]
end


local ids = redis.call('ZRANGE', k.failed, '-inf', upto, 'BYSCORE', 'LIMIT', 0, batch)
local now = now_ms()
if #ids > 0 then
  -- Queue order for the whole batch in one step, in the order they failed.
  local seq = redis.call('HINCRBY', k.meta, 'qseq', #ids) - #ids
  local records = redis.call('HMGET', k.runs, unpack(ids))
  local queued, saved, timed_out = {}, {}, 0
  for i, run_id in ipairs(ids) do
    local run, why = nil, nil
    if records[i] then run, why = run_decode(records[i]) end
    if why then
      run_aside(k, run_id, records[i], why)
    elseif run then
      timed_out = timed_out + queue_unbury(run, action.max_retries, now)
      seq = seq + 1
      queued[#queued + 1] = priority_score(run.p or 0, seq)
      queued[#queued + 1] = run_id
      saved[#saved + 1] = run_id
      saved[#saved + 1] = cmsgpack.pack(run)
    end
  end
  redis.call('ZREM', k.failed, unpack(ids))
  tally_untimed(k.meta, timed_out)
  if #queued > 0 then
    redis.call('HSET', k.runs, unpack(saved))
    redis.call('ZADD', k.pending, unpack(queued))
    handoff_ready(k, action, now, #queued / 2)
  end
end
local out = {ST_OK, #ids, redis.call('ZCOUNT', k.failed, '-inf', upto), upto}
for i, v in ipairs(k.aside) do out[4 + i] = v end
return out
