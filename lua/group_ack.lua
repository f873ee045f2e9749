--[[ group_ack
  Acknowledge entries of a group: they leave its pending list for good. With a token
  (the delivery count of the caller's delivery) the whole call is refused, changing
  nothing, if any entry has been delivered again since (or, with a consumer, is held by
  another consumer). Entries no longer pending (already acked) are skipped, so a resend
  is answered OK.
  KEYS[1] log         STREAM  the records (the group lives here)
  KEYS[2] config      HASH    the group's settings
  KEYS[3] due         ZSET    entry id -> ms when it is to be delivered again
  KEYS[4] deliveries  HASH    entry id -> msgpack {o owner, c consumer, nk nacked}
  KEYS[5] owners      HASH    owner id -> ms since it is suspected gone (0: not)
  KEYS[6] owned       ZSET    "<owner>\0<entry id>": the deliveries each owner holds
  ARGV[1] group
  ARGV[2] consumer  '' or the acking consumer (checked only with a token)
  ARGV[3] token     '' (any consumer may ack) or the caller's delivery count (1 .. 2^53)
  ARGV[4] ids       msgpack list of entry ids (at most 1000)
  Returns {status, acked, stale_id, current_count, holder}
          status: OK | NO_GROUP | STALE (nothing acked; stale_id was delivered again)
]]
--@include lib/status.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], config = KEYS[2]}
local g = {due = KEYS[3], deliveries = KEYS[4], owners = KEYS[5], owned = KEYS[6]}
local group = ARGV[1]
local consumer = ARGV[2]
local token = ARGV[3]
local ids = arg_stream_ids(ARGV[4], BATCH_MAX)

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if token ~= '' and not arg_int(token, 1, INT_MAX) then return {ST_BAD_ARG, 3} end
if not ids then return {ST_BAD_ARG, 4} end

if not group_exists(k.log, k.config) then return {ST_NO_GROUP, 0, '', 0, ''} end
local held = {}
for _, id in ipairs(ids) do
  local p = group_pending_entry(k.log, group, id)
  if p then
    if group_stale(p, token, consumer) then
      return {ST_STALE, 0, id, p[4], p[2]}
    end
    held[#held + 1] = id
  end
end
if #held == 0 then return {ST_OK, 0, '', 0, ''} end
local acked = redis.call('XACK', k.log, group, unpack(held))
group_untrack_recorded(g, held)
return {ST_OK, acked, '', 0, ''}
