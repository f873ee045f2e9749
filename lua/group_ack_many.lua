--[[ group_ack_many
  Acknowledge several entries of a group in one call, each with its own token and each
  answered on its own, under exactly group_ack's rules: an entry whose delivery the token
  no longer names (delivered again since, or held by another consumer) is refused as
  STALE and stays pending; an entry no longer pending (already acked) answers OK.
  KEYS[1] log         STREAM  the records (the group lives here)
  KEYS[2] config      HASH    the group's settings
  KEYS[3] due         ZSET    entry id -> ms when it is to be delivered again
  KEYS[4] deliveries  HASH    entry id -> msgpack {o owner, c consumer, nk nacked}
  KEYS[5] owners      HASH    owner id -> ms since it is suspected gone (0: not)
  KEYS[6] owned       ZSET    "<owner>\0<entry id>": the deliveries each owner holds
  ARGV[1] group
  ARGV[2] consumer  '' or the acking consumer (checked where an item has a token)
  ARGV[3] items     msgpack list of {entry id, token (1 .. 2^53; '' = any consumer may ack)}
  ARGV[4] owner     '' or the acking process's owner id: where the entries' owner index
                    entries are looked for first (the same outcome either way, cheaper
                    when the acker is the reader)
  Returns {status, (item_status, current_count) * n}
          status: OK | NO_GROUP | OUT_OF_RANGE; item_status: OK | STALE
]]
--@include lib/status.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], config = KEYS[2]}
local g = {due = KEYS[3], deliveries = KEYS[4], owners = KEYS[5], owned = KEYS[6]}
local group = ARGV[1]
local consumer = ARGV[2]
local items = arg_array(ARGV[3], INT_MAX)
local owner = ARGV[4] or ''
local MAX_ITEMS = 1000

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if not items then return {ST_BAD_ARG, 3} end
if #items > MAX_ITEMS then return {ST_OUT_OF_RANGE, MAX_ITEMS} end
for _, item in ipairs(items) do
  if type(item) ~= 'table' or not arg_stream_id(item[1])
      or (item[2] ~= '' and not arg_int(item[2], 1, INT_MAX)) then
    return {ST_BAD_ARG, 3}
  end
end

if not group_exists(k.log, k.config) then return {ST_NO_GROUP} end
local out = {ST_OK}
local held = {}
local ids = {}
for _, item in ipairs(items) do ids[#ids + 1] = item[1] end
local pending = group_pending_many(k.log, group, ids, consumer, 2 * #ids + 100)
for _, item in ipairs(items) do
  local id, token = item[1], item[2]
  local p = pending[id]
  if p and group_stale(p, token, consumer) then
    out[#out + 1] = ST_STALE
    out[#out + 1] = p[4]
  else
    if p then held[#held + 1] = id end
    out[#out + 1] = ST_OK
    out[#out + 1] = 0
  end
end
if #held > 0 then
  redis.call('XACK', k.log, group, unpack(held))
  group_untrack_recorded(g, held, owner)
end
return out
