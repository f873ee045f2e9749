--[[ slot_release
  Give a concurrency slot back, for its exact current holder only: the owner and the
  token must both match. A late release by an old owner, after the slot was taken back
  and given to a replacement, is refused (WRONG_OWNER) and changes nothing; so is one
  whose token is not the current one (STALE). Resending a release that already took
  effect is answered OK.
  KEYS[1] meta     HASH  counters (stat:* statistics)
  KEYS[2] slots    HASH  slot index -> msgpack holder {o, t, d, sx}, or {r}/{x} once free
  KEYS[3] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] slot     the slot index from acquire (1 .. 1000)
  ARGV[2] owner    the releasing owner id
  ARGV[3] token    the token from acquire (1 .. 2^53)
  Returns {status, holder_token}
          status: OK | NOT_FOUND | WRONG_OWNER | STALE | BAD_RECORD (the slot's record does
          not decode: it was set aside, and the slot is free); holder_token: the current
          holder's token when refused, else 0
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/slots.lua
local k = {meta = KEYS[1], slots = KEYS[2], quarantine = KEYS[3]}
local slot = ARGV[1]
local owner = ARGV[2]
local token = arg_int(ARGV[3], 1, INT_MAX)

if not arg_int(slot, 1, 1000) then return {ST_BAD_ARG, 1} end
if not token then return {ST_BAD_ARG, 3} end

local raw = redis.call('HGET', k.slots, slot)
if not raw then return {ST_NOT_FOUND, 0} end
local holder, why = slot_decode(raw)
if not holder then
  record_aside(k.quarantine, 'slot', slot, raw, why, '')
  redis.call('HDEL', k.slots, slot)
  return {ST_BAD_RECORD, 0}
end
if not holder.o then
  if holder.r == token then return {ST_OK, 0} end
  redis.call('HINCRBY', k.meta, 'stat:slot_release_refused', 1)
  return {ST_STALE, 0}
end
if holder.o ~= owner then
  redis.call('HINCRBY', k.meta, 'stat:slot_release_refused', 1)
  return {ST_WRONG_OWNER, holder.t}
end
if holder.t ~= token then
  redis.call('HINCRBY', k.meta, 'stat:slot_release_refused', 1)
  return {ST_STALE, holder.t}
end
redis.call('HSET', k.slots, slot, cmsgpack.pack({r = token}))
return {ST_OK, 0}
