--[[ slot_acquire
  Take one of an action's concurrency slots for an owner: the first slot that is free or
  whose lease deadline has passed (that holder is replaced; counted as a deadline reclaim).
  The slot gets a new fencing token, so nothing a previous holder sends applies after.
  KEYS[1] definition HASH  the action's settings
  KEYS[2] meta     HASH  counters (slot_token: slot fencing tokens; stat:* statistics)
  KEYS[3] slots    HASH  slot index -> msgpack {o owner, t token, d deadline ms, sx suspect
                         since ms} of its holder; once free {r token} (released)
                         or {x token} (taken back)
  KEYS[4] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] owner     the taking worker process's owner id
  ARGV[2] capacity  number of slots (1..1000); 0: the action's max_concurrency
  ARGV[3] lease_ms  the slot is taken back this long after acquire (1..86400000); 0: never
  Returns {status, slot, token, deadline_ms, (kind, field, why) * m}
          status: OK | NO_ACTION | OUT_OF_RANGE (capacity 0 and the action has no
          max_concurrency); slot 0 when every slot is held; then each slot record this call
          set aside because it does not decode (kind 'slot', field the slot index, why):
          such a slot is taken as free
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/action.lua
--@include lib/ids.lua
--@include lib/slots.lua
local k = {definition = KEYS[1], meta = KEYS[2], slots = KEYS[3], quarantine = KEYS[4]}
local MAX_SLOTS = 1000
local MAX_LEASE_MS = 86400000
local owner = ARGV[1]
local capacity = arg_int(ARGV[2], 0, MAX_SLOTS)
local lease_ms = arg_int(ARGV[3], 0, MAX_LEASE_MS)

if owner == '' then return {ST_BAD_ARG, 1} end
if not capacity then return {ST_BAD_ARG, 2} end
if not lease_ms then return {ST_BAD_ARG, 3} end

local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
if capacity == 0 then capacity = math.min(action.max_concurrency, MAX_SLOTS) end
if capacity < 1 then return {ST_OUT_OF_RANGE} end

local now = now_ms()
local aside = {}
for slot = 1, capacity do
  local raw = redis.call('HGET', k.slots, slot)
  local holder, why = nil, nil
  if raw then holder, why = slot_decode(raw) end
  if why then
    record_aside(k.quarantine, 'slot', tostring(slot), raw, why, '', aside)
    holder = nil
  end
  local free = not holder or not holder.o
  local expired = not free and holder.d < now
  if free or expired then
    if expired then redis.call('HINCRBY', k.meta, 'stat:slot_reclaimed_deadline', 1) end
    local deadline = NEVER_MS
    if lease_ms > 0 then deadline = now + lease_ms end
    local token = ids_take(k.meta, 'slot_token', 1, now)
    redis.call('HSET', k.slots, slot, cmsgpack.pack({o = owner, t = token, d = deadline}))
    local out = {ST_OK, slot, token, deadline}
    for i, v in ipairs(aside) do out[4 + i] = v end
    return out
  end
end
local out = {ST_OK, 0, 0, -1}
for i, v in ipairs(aside) do out[4 + i] = v end
return out
