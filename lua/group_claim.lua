--[[ group_claim
  Take up to `count` pending entries of a group for `consumer`, scanning the pending list
  in id order from `start`: the consumer's own entries always, and with min_idle_ms > 0
  also entries other consumers have left idle at least that long (never theirs with 0).
  Each taken entry is delivered again (delivery count raised); one already delivered
  max_deliver times is dead-lettered instead. At most `scan` entries are inspected; the
  cursor names the first one not inspected. A missing stream or group answers done.
  KEYS[1] log         STREAM  the records (the group lives here)
  KEYS[2] config      HASH    the group's settings
  KEYS[3] due         ZSET    entry id -> ms when it is to be delivered again
  KEYS[4] deliveries  HASH    entry id -> msgpack {o owner, c consumer, nk nacked}
  KEYS[5] dead        STREAM  the group's dead letters
  KEYS[6] owners      HASH    owner id -> ms since it is suspected gone (0: not)
  KEYS[7] owned       ZSET    "<owner>\0<entry id>": the deliveries each owner holds
  ARGV[1] group
  ARGV[2] consumer
  ARGV[3] owner        the claiming process's owner id
  ARGV[4] min_idle_ms  0 .. 2^53; 0: only the consumer's own entries
  ARGV[5] start        first id to inspect (inclusive), or '-'
  ARGV[6] count        at most this many entries taken (1..1000)
  ARGV[7] scan         at most this many entries inspected (1..1000)
  Returns {status, done, next_id, n, (id, token, payload, headers) * n}
          status: OK; done: 1 when the scan reached the end (next_id is then '')
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], config = KEYS[2]}
local g = {due = KEYS[3], deliveries = KEYS[4], dead = KEYS[5], owners = KEYS[6],
  owned = KEYS[7]}
local group = ARGV[1]
local consumer = ARGV[2]
local owner = ARGV[3]
local min_idle_ms = arg_int(ARGV[4], 0, INT_MAX)
local start = ARGV[5]
local count = arg_int(ARGV[6], 1, BATCH_MAX)
local scan = arg_int(ARGV[7], 1, BATCH_MAX)

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if owner == '' then return {ST_BAD_ARG, 3} end
if not min_idle_ms then return {ST_BAD_ARG, 4} end
if start ~= '-' and not arg_stream_id(start) then return {ST_BAD_ARG, 5} end
if not count then return {ST_BAD_ARG, 6} end
if not scan then return {ST_BAD_ARG, 7} end

if not group_exists(k.log, k.config) then return {ST_OK, 1, '', 0} end
local now = now_ms()
local ack_timeout_ms, max_deliver = group_settings(k.config)

local candidates
if min_idle_ms == 0 then
  scan = count
  candidates = redis.call('XPENDING', k.log, group, start, '+', scan + 1, consumer)
else
  candidates = redis.call('XPENDING', k.log, group, start, '+', scan + 1)
end

local out = {ST_OK, 1, '', 0}
local taken = 0
for i, p in ipairs(candidates) do
  if taken >= count or i > scan then
    out[2] = 0
    out[3] = p[1]
    break
  end
  if p[2] == consumer or p[3] >= min_idle_ms then
    taken = taken + 1
    if p[4] >= max_deliver then
      group_bury(k.log, g, group, p[1], p[4], p[2], 'max_deliver', now)
    else
      local fields = group_redeliver(k.log, g, group, p[1], p[4], consumer, owner, now, ack_timeout_ms)
      if fields then
        out[4] = out[4] + 1
        group_hand_out(out, p[1], p[4] + 1, fields)
      end
    end
  end
end
return out
