--[[ group_reclaim
  Give back the deliveries of owners whose worker process is gone, in one consumer group.
  For each named owner the subscriber count of its liveness channel decides, as for
  actions (action_reclaim, lib/owners.lua): present clears a suspicion; absent is first
  suspected, then judged gone once absent for grace_ms. Each entry whose current delivery
  names a gone owner becomes due at once, so the next group_read delivers it again, its
  delivery count (and so its token) raised; a frozen owner keeps its subscription, so only
  the ack timeout applies to it. At most `batch` index entries of gone owners per call
  (a batch read in one group_read counts as the entries of it still pending, at least 1).
  KEYS[1] log         STREAM  the records (the group lives here)
  KEYS[2] config      HASH    the group's settings; stat:* fields count reclaims
  KEYS[3] due         ZSET    entry id -> ms when it is to be delivered again
  KEYS[4] deliveries  HASH    entry id -> msgpack {o owner, c consumer, nk nacked}
  KEYS[5] owners      HASH    owner id -> ms since it is suspected gone (0: not)
  KEYS[6] owned       ZSET    "<owner>\0<entry id>": the deliveries each owner holds
  KEYS[7] wake        CHANNEL sharded channel announcing records to read
  KEYS[8] batches     ZSET    "<owner>\0<lo>\0<hi>\0<consumer>" (score 0): batches read
  KEYS[9] batch_due   ZSET    batch -> ms when its entries still unacked are due again
  KEYS[10..n] channels  CHANNEL  the liveness channel of each owner named in ARGV[4],
                        in the same order
  ARGV[1] group
  ARGV[2] grace_ms  how long an owner must stay absent before it is judged gone
                    (0 .. 2^32 - 1)
  ARGV[3] batch     at most this many index entries of gone owners (1..1000)
  ARGV[4] owners    msgpack array of owner ids (at most 100)
  Returns {status, reclaimed, wait_ms, more}
          status: OK | NO_GROUP | OUT_OF_RANGE (also: a channel that is not exactly
          its owner's liveness channel in this partition's slot, lib/channels.lua);
          reclaimed: entries made due again;
          wait_ms: when the earliest suspect's grace ends (-1: none); more: 1 if the
          batch ran out
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/stream.lua
--@include lib/owners.lua
--@include lib/checked.lua
local k = {log = KEYS[1], config = KEYS[2], wake = KEYS[7]}
local g = {due = KEYS[3], deliveries = KEYS[4], owners = KEYS[5], owned = KEYS[6],
  batches = KEYS[8], batch_due = KEYS[9]}
local channels = {}
for i = 10, #KEYS do channels[#channels + 1] = KEYS[i] end
local group = ARGV[1]
local grace_ms = arg_int(ARGV[2], 0, U32_MAX)
local batch = arg_int(ARGV[3], 1, RECLAIM_MAX_BATCH)
local owners = arg_names(ARGV[4], RECLAIM_MAX_OWNERS)

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if not grace_ms then return {ST_BAD_ARG, 2} end

if not batch then return {ST_BAD_ARG, 3} end
if not owners then return {ST_BAD_ARG, 4} end

if reclaim_refused(grace_ms, batch, owners, channels, k.log) then return {ST_OUT_OF_RANGE} end
if not group_exists(k.log, k.config) then return {ST_NO_GROUP} end
local now = now_ms()
local reclaimed, budget = 0, {left = batch}

-- Make what `owner` holds due now, up to the budget; true once nothing of it is left:
-- the entries recorded on their own, then the batches it read.
local function give_back(owner)
  local alone = owned_take_back(g.owned, owner, budget, function(id)
    if group_delivery(g.deliveries, id).o == owner and group_pending_entry(k.log, group, id) then
      redis.call('ZADD', g.due, 'LT', now, id)
      reclaimed = reclaimed + 1
    end
  end)
  local first, last = '[' .. owner .. BATCH_SEP, '(' .. owner .. '\1'
  while budget.left > 0 do
    local b = redis.call('ZRANGE', g.batches, first, last, 'BYLEX', 'LIMIT', 0, 1)[1]
    if not b then break end
    local n = batch_expand(k.log, g, group, b, now)
    reclaimed = reclaimed + n
    budget.left = budget.left - math.max(n, 1)
  end
  return alone and #redis.call('ZRANGE', g.batches, first, last, 'BYLEX', 'LIMIT', 0, 1) == 0
end

local judged = owners_judge(g.owners, owners, channels, now, grace_ms, give_back)
if reclaimed > 0 then
  redis.call('HINCRBY', k.config, 'stat:reclaimed_owner_gone', reclaimed)
  redis.call('SPUBLISH', k.wake, '1')
end
return {ST_OK, reclaimed, judged.wait, judged.more}
