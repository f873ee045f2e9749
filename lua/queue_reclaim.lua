--[[ queue_reclaim
  Take back the deliveries of consumers whose process is gone, in one plain queue. For
  each named owner the subscriber count of its liveness channel decides, as for actions
  and stream groups (lib/owners.lua): present clears a suspicion; absent is first
  suspected, then judged gone once absent for grace_ms. Each message whose current
  delivery names a gone owner is ready again (its delivery counted), or dead-lettered
  once delivered its limit of times. A frozen owner keeps its subscription, so only the
  visibility deadline applies to it. At most `batch` index entries of gone owners per call.
  KEYS[1] meta    HASH  seq counter; stat:* counters
  KEYS[2] msgs    HASH  seq -> msgpack record (lib/message.lua)
  KEYS[3] ready   ZSET  seq -> priority * 2^45 + queue order
  KEYS[4] leases  ZSET  seq -> visibility deadline ms
  KEYS[5] dead    ZSET  seq -> ms it was dead-lettered
  KEYS[6] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[7] owned   ZSET  "<owner>\0<seq>" (score 0): the deliveries each owner holds
  KEYS[8] wake    CHANNEL  sharded channel announcing messages to take
  KEYS[9] bodies  HASH  seq -> payload bytes
  KEYS[10] quarantine STREAM  records set aside (lib/record.lua)
  KEYS[11..n] channels  CHANNEL  the liveness channel of each owner named in ARGV[3],
                        in the same order
  ARGV[1] grace_ms  how long an owner must stay absent before it is judged gone
                    (0 .. 2^32 - 1)
  ARGV[2] batch     at most this many index entries of gone owners (1..1000)
  ARGV[3] owners    msgpack array of owner ids (at most 100)
  Returns {status, reclaimed, wait_ms, more, (kind, field, why) * m}
          status: OK | OUT_OF_RANGE (also: a channel that is not exactly its owner's
          liveness channel in this queue's slot, lib/channels.lua); reclaimed: deliveries
          taken back; wait_ms: when the earliest suspect's grace ends (-1: none); more: 1
          if the batch ran out; then each record this call set aside because it does not
          decode (kind 'message', field its seq, why)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/message.lua
--@include lib/owners.lua
--@include lib/checked.lua
local k = {meta = KEYS[1], msgs = KEYS[2], ready = KEYS[3], leases = KEYS[4], dead = KEYS[5],
  owners = KEYS[6], owned = KEYS[7], wake = KEYS[8], bodies = KEYS[9], quarantine = KEYS[10],
  aside = {}}
local channels = {}
for i = 11, #KEYS do channels[#channels + 1] = KEYS[i] end
local grace_ms = arg_int(ARGV[1], 0, U32_MAX)
local batch = arg_int(ARGV[2], 1, RECLAIM_MAX_BATCH)
local owners = arg_names(ARGV[3], RECLAIM_MAX_OWNERS)

if not grace_ms then return {ST_BAD_ARG, 1} end
if not batch then return {ST_BAD_ARG, 2} end
if not owners then return {ST_BAD_ARG, 3} end
if reclaim_refused(grace_ms, batch, owners, channels, k.owners) then
  return {ST_OUT_OF_RANGE, 0, -1, 0}
end
local now = now_ms()
local reclaimed, ready, budget = 0, 0, {left = batch}

-- Take back what `owner` holds, up to the budget; true once nothing of it is left.
local function take_back(owner)
  return owned_take_back(k.owned, owner, budget, function(seq)
    local m, why, raw = msg_load(k.msgs, seq)
    if m == false then
      msg_aside(k, seq, raw, why)
    elseif m and m.o == owner and redis.call('ZSCORE', k.leases, seq) then
      reclaimed = reclaimed + 1
      ready = ready + msg_release(k, seq, m, now)
    end
  end)
end

local judged = owners_judge(k.owners, owners, channels, now, grace_ms, take_back)
if reclaimed > 0 then redis.call('HINCRBY', k.meta, 'stat:reclaimed_owner_gone', reclaimed) end
if judged.gone > 0 then redis.call('HINCRBY', k.meta, 'stat:owners_gone', judged.gone) end
if ready > 0 then redis.call('SPUBLISH', k.wake, '1') end
local out = {ST_OK, reclaimed, judged.wait, judged.more}
for i, v in ipairs(k.aside) do out[4 + i] = v end
return out
