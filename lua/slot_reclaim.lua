--[[ slot_reclaim
  Take a concurrency slot back from its holder, only if the holder is exactly the expected
  owner and that owner is gone (its liveness channel stayed without a subscriber for
  grace_ms; the first time it is seen absent it is only suspected) or the slot's lease
  deadline has passed. A wrong expected owner is refused (WRONG_OWNER) and a live holder
  is refused (OWNER_ALIVE; a suspicion of it is cleared). Neither changes the slot.
  KEYS[1] meta     HASH  counters (stat:* statistics)
  KEYS[2] slots    HASH  slot index -> msgpack holder {o, t, d, sx}, or {r}/{x} once free
  KEYS[3] channel  CHANNEL  the expected owner's liveness channel in this slot (refused
                            as OUT_OF_RANGE unless it is exactly that owner's channel in
                            this queue's slot: lib/channels.lua)
  ARGV[1] slot            the slot index (1 .. 1000)
  ARGV[2] expected_owner  the owner the caller believes holds it
  ARGV[3] grace_ms        how long the owner must stay absent (0 .. 2^32 - 1)
  Returns {status, reclaimed, wait_ms}
          status: OK | NOT_FOUND | WRONG_OWNER | OWNER_ALIVE | OUT_OF_RANGE;
          reclaimed: 1 if the slot is free now, 0 while its owner is only suspected;
          wait_ms: when to ask again (-1: no need)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/owners.lua
--@include lib/checked.lua
--@include lib/slots.lua
local k = {meta = KEYS[1], slots = KEYS[2], channel = KEYS[3]}
local slot = ARGV[1]
local expected_owner = ARGV[2]
local grace_ms = arg_int(ARGV[3], 0, U32_MAX)

if not arg_int(slot, 1, 1000) then return {ST_BAD_ARG, 1} end
if not grace_ms then return {ST_BAD_ARG, 3} end
if not owner_channel_of(k.channel, expected_owner, k.slots) then
  return {ST_OUT_OF_RANGE, 0, -1}
end
local raw = redis.call('HGET', k.slots, slot)
-- A record that does not decode holds nothing to reclaim: slot_acquire sets it aside.
local holder = raw and slot_decode(raw)
if not holder or not holder.o then return {ST_NOT_FOUND, 0, -1} end
if holder.o ~= expected_owner then return {ST_WRONG_OWNER, 0, -1} end

local now = now_ms()
local function free(stat)
  redis.call('HSET', k.slots, slot, cmsgpack.pack({x = holder.t}))
  redis.call('HINCRBY', k.meta, stat, 1)
  return {ST_OK, 1, -1}
end
if holder.d < now then return free('stat:slot_reclaimed_deadline') end
local since = holder.sx or 0
local verdict, mark = owner_verdict(owner_present(k.channel), since, now, grace_ms)
if verdict == 'gone' then return free('stat:slot_reclaimed_owner_gone') end
if mark ~= since then
  holder.sx = mark
  if mark == 0 then holder.sx = nil end
  redis.call('HSET', k.slots, slot, cmsgpack.pack(holder))
end
if verdict == 'alive' then return {ST_OWNER_ALIVE, 0, -1} end
return {ST_OK, 0, mark + grace_ms - now}
