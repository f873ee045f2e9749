--[[ group_nack
  Give entries of a group back for redelivery: each becomes due at once, so a later
  group_read hands it out again (before new entries) with its delivery count raised. An
  entry already delivered max_deliver times is dead-lettered now instead. With a token the
  whole call is refused, changing nothing, if any entry has been delivered again since.
  Entries no longer pending are skipped, so a resend is answered OK.
  KEYS[1] log         STREAM   the records (the group lives here)
  KEYS[2] config      HASH     the group's settings
  KEYS[3] due         ZSET     entry id -> ms when it is to be delivered again
  KEYS[4] deliveries  HASH     entry id -> msgpack {o owner, c consumer, nk nacked}
  KEYS[5] dead        STREAM   the group's dead letters
  KEYS[6] wake        CHANNEL  sharded channel announcing records to read
  KEYS[7] owners      HASH    owner id -> ms since it is suspected gone (0: not)
  KEYS[8] owned       ZSET    "<owner>\0<entry id>": the deliveries each owner holds
  ARGV[1] group
  ARGV[2] consumer  '' or the nacking consumer (checked only with a token)
  ARGV[3] token     '' (any consumer may nack) or the caller's delivery count (1 .. 2^53)
  ARGV[4] ids       msgpack list of entry ids (at most 1000)
  Returns {status, nacked, dead, stale_id, current_count, holder}
          status: OK | NO_GROUP | STALE (nothing nacked; stale_id was delivered again)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], config = KEYS[2], wake = KEYS[6]}
local g = {due = KEYS[3], deliveries = KEYS[4], dead = KEYS[5], owners = KEYS[7],
  owned = KEYS[8]}
local group = ARGV[1]
local consumer = ARGV[2]
local token = ARGV[3]
local ids = arg_stream_ids(ARGV[4], BATCH_MAX)

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if token ~= '' and not arg_int(token, 1, INT_MAX) then return {ST_BAD_ARG, 3} end
if not ids then return {ST_BAD_ARG, 4} end

if not group_exists(k.log, k.config) then return {ST_NO_GROUP, 0, 0, '', 0, ''} end
local held = {}
for _, id in ipairs(ids) do
  local p = group_pending_entry(k.log, group, id)
  if p then
    if group_stale(p, token, consumer) then
      return {ST_STALE, 0, 0, id, p[4], p[2]}
    end
    held[#held + 1] = p
  end
end

local now = now_ms()
local _, max_deliver = group_settings(k.config)
local nacked, dead = 0, 0
for _, p in ipairs(held) do
  local id = p[1]
  local delivery = group_delivery(g.deliveries, id)
  if p[4] >= max_deliver then
    group_bury(k.log, g, group, id, p[4], p[2], 'nacked', now)
    dead = dead + 1
  else
    delivery.nk = 1
    redis.call('HSET', g.deliveries, id, cmsgpack.pack(delivery))
    redis.call('ZADD', g.due, 'LT', now, id)
    nacked = nacked + 1
  end
end
if nacked > 0 then redis.call('SPUBLISH', k.wake, '1') end
return {ST_OK, nacked, dead, '', 0, ''}
