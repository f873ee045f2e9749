--[[ group_read
  Hand up to `count` entries of a group to `consumer`: first entries due again (nacked,
  or unacked past the group's ack timeout) with their delivery count raised, then new
  entries. An entry already delivered max_deliver times is dead-lettered instead of
  delivered again. Creates the group (at the beginning of the stream) when missing.
  A retried poll (same poll id) gets back what that poll was handed, not new entries.
  KEYS[1] log         STREAM  the records (the group lives here)
  KEYS[2] config      HASH    the group's settings
  KEYS[3] due         ZSET    entry id -> ms when it is to be delivered again
  KEYS[4] deliveries  HASH    entry id -> msgpack {o owner, c consumer, nk nacked}
  KEYS[5] dead        STREAM  the group's dead letters
  KEYS[6] polls       HASH    poll id -> msgpack {ids, tokens} handed to that poll
  KEYS[7] poll_times  ZSET    poll id -> ms (memos are forgotten after two minutes)
  KEYS[8] owners      HASH    owner id -> ms since it is suspected gone (0: not)
  KEYS[9] owned       ZSET    "<owner>\0<entry id>": the deliveries each owner holds
  ARGV[1] group
  ARGV[2] consumer
  ARGV[3] owner     the reading process's owner id
  ARGV[4] count     at most this many entries (1..1000)
  ARGV[5] poll_id   '' or an id the caller reuses when it retries this poll
  Returns {status, wait_ms, n, (id, token, payload, headers) * n}
          status: OK; wait_ms: ms until the next entry falls due again, or -1
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/stream.lua
--@include lib/polls.lua
local k = {log = KEYS[1], config = KEYS[2]}
local g = {due = KEYS[3], deliveries = KEYS[4], dead = KEYS[5], owners = KEYS[8],
  owned = KEYS[9]}
local polls = KEYS[6]
local poll_times = KEYS[7]
local group = ARGV[1]
local consumer = ARGV[2]
local owner = ARGV[3]
local count = tonumber(ARGV[4])
local poll_id = ARGV[5]

local now = now_ms()
local out = {ST_OK, -1, 0}

local function wait_ms()
  local first = redis.call('ZRANGE', g.due, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return math.max(tonumber(first[2]) - now, 0)
end

local function hand_out(id, token, fields)
  out[3] = out[3] + 1
  group_hand_out(out, id, token, fields)
end

group_ensure(k.log, k.config, group, now)
local ack_timeout_ms, max_deliver = group_settings(k.config)

-- A retried poll: answer with what this poll id was handed, where still this delivery.
-- When none of it is still delivered to us (acked, or taken back), read afresh.
local replayed = poll_replay(polls, poll_times, poll_id, now, function(id, token)
  local p = group_pending_entry(k.log, group, id)
  if not (p and p[2] == consumer and p[4] == token) then return false end
  local fields = stream_entry(k.log, id)
  if not fields then return false end
  hand_out(id, token, fields)
  return true
end)
if replayed > 0 then
  out[2] = wait_ms()
  return out
end

local memo = poll_memo()
local function deliver(id, token, fields)
  hand_out(id, token, fields)
  poll_memo_add(memo, id, token)
end

-- Entries due again: nacked ones and those past their ack timeout, oldest due first.
local due = redis.call('ZRANGE', g.due, '-inf', now, 'BYSCORE', 'LIMIT', 0, count)
for _, id in ipairs(due) do
  local p = group_pending_entry(k.log, group, id)
  if not p then
    group_untrack(g, {id})
  elseif p[4] >= max_deliver then
    local why = 'ack_timeout'
    if group_delivery(g.deliveries, id).nk then why = 'nacked' end
    group_bury(k.log, g, group, id, p[4], p[2], why, now)
  else
    local fields = group_redeliver(k.log, g, group, id, p[4], consumer, owner, now, ack_timeout_ms)
    if fields then deliver(id, p[4] + 1, fields) end
  end
end

-- Then new entries, past the group's cursor.
local room = count - out[3]
if room > 0 then
  local read = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', room,
    'STREAMS', k.log, '>')
  if read and read[1] then
    local ids = {}
    for _, entry in ipairs(read[1][2]) do ids[#ids + 1] = entry[1] end
    group_track_many(g, ids, consumer, owner, now, ack_timeout_ms, true)
    for _, entry in ipairs(read[1][2]) do deliver(entry[1], 1, entry[2]) end
  end
end

poll_remember(polls, poll_times, poll_id, memo, now)
out[2] = wait_ms()
return out
