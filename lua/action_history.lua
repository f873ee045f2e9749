--[[ action_history
  What an action's runs did in each of the last `minutes` minutes (lib/history.lua): the
  slots of its history ring, oldest minute first, each padded to its width. Read only:
  at most two GETRANGEs (a read of counts then keeps each slot's first bytes).
  KEYS[1] definition HASH  the action's settings
  KEYS[2] history  STRING  runs per minute over 72 hours (lib/history.lua)
  ARGV[1] minutes  how many minutes, the current one last (1 .. 4320)
  ARGV[2] detail   1: each slot whole (151 bytes: minute, counts, pickup and duration
                   buckets); 0: each slot's minute and counts only (13 bytes)
  Returns {status, now_ms, slots}   status: OK | NO_ACTION; slots: `minutes` slots of
          the width asked, back to back, the first for minute now / 60000 - minutes + 1;
          a slot whose minute (its first 4 bytes, big-endian) is not the one it stands
          for holds nothing
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/clock.lua
--@include lib/history.lua
local k = {definition = KEYS[1], history = KEYS[2]}
local minutes = arg_int(ARGV[1], 1, HISTORY.MINUTES)
local detail = arg_flag(ARGV[2])
local COUNTS_WIDTH = 13

if not minutes then return {ST_BAD_ARG, 1} end
if detail == nil then return {ST_BAD_ARG, 2} end

if redis.call('EXISTS', k.definition) == 0 then return {ST_NO_ACTION} end
local now = now_ms()
local first = redis.call('BITFIELD_RO', k.history, 'GET', 'u32', 0)[1]
if first == 0 then return {ST_OK, now, ''} end
local oldest = math.floor(now / 60000) - minutes + 1

-- `width` bytes of the ring from byte `from`, zeros where the string ends.
local function bytes(from, width)
  local got = redis.call('GETRANGE', k.history, from, from + width - 1)
  if #got < width then got = got .. string.rep('\0', width - #got) end
  return got
end

local start = (oldest - first) % HISTORY.MINUTES
local head = math.min(minutes, HISTORY.MINUTES - start)
local slots = bytes(HISTORY.HEAD + start * HISTORY.SLOT, head * HISTORY.SLOT)
if head < minutes then  -- the window wraps round the ring's end
  slots = slots .. bytes(HISTORY.HEAD, (minutes - head) * HISTORY.SLOT)
end
if detail then return {ST_OK, now, slots} end
local parts, sub = {}, string.sub
for i = 0, minutes - 1 do
  local at = i * HISTORY.SLOT
  parts[i + 1] = sub(slots, at + 1, at + COUNTS_WIDTH)
end
return {ST_OK, now, table.concat(parts)}
