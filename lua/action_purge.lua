--[[ action_purge
  Delete up to `batch` of an action's runs in one state (pending, delayed, completed or
  failed), oldest first, with their inputs and idempotency keys. Called repeatedly with
  the `upto` of the first call, it deletes every run that was in the state when the first
  call ran (its score at or below the highest score then), and none added later with a
  higher score, so the loop ends. Running runs are never purged (their workers hold them).
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters (lib/tally.lua)
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] pending  ZSET  run_id -> queue order
  KEYS[6] delayed  ZSET  run_id -> due ms
  KEYS[7] done     ZSET  run_id -> finished ms
  KEYS[8] failed   ZSET  run_id -> finished ms
  KEYS[9] idempotency HASH  idempotency key -> run_id
  KEYS[10] outbox  ZSET  graph messages -> ms due (lib/graph.lua)
  ARGV[1] state    pending | delayed | completed | failed
  ARGV[2] upto     delete runs scored at or below this (an integer 0 .. 2^53 - 1); '' =
                   the highest score now
  ARGV[3] batch    1 .. 500
  Returns {status, purged, remaining, upto}   status: OK | NO_ACTION;
          remaining: runs of the state left at or below upto
]]
--@include lib/status.lua
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/action.lua
--@include lib/states.lua
--@include lib/checked.lua
local k = {definition = KEYS[1], meta = KEYS[2], runs = KEYS[3], inputs = KEYS[4],
  pending = KEYS[5], delayed = KEYS[6], done = KEYS[7], failed = KEYS[8], idempotency = KEYS[9], outbox = KEYS[10]}
local MAX_BATCH = 500
local state = ARGV[1]
local upto = arg_int_or_none(ARGV[2], 0, INT_MAX)
local batch = arg_int(ARGV[3], 1, MAX_BATCH)

local set = state ~= 'running' and state_set(k, state)
if not set then return {ST_BAD_ARG, 1} end
if upto == nil then return {ST_BAD_ARG, 2} end
if not batch then return {ST_BAD_ARG, 3} end
if redis.call('EXISTS', k.definition) == 0 then return {ST_NO_ACTION} end
if upto then
  upto = string.format('%d', upto)
else
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if #last == 0 then return {ST_OK, 0, 0, '-inf'} end
  upto = last[2]
end


local ids = redis.call('ZRANGE', set, '-inf', upto, 'BYSCORE', 'LIMIT', 0, batch)
local timed_out = queue_forget(k, set, ids, true)
if set == k.failed then tally_untimed(k.meta, timed_out) end
return {ST_OK, #ids, redis.call('ZCOUNT', set, '-inf', upto), upto}
