--[[ group_read
  Hand up to `count` entries of a group to `consumer`: first entries due again (nacked,
  or unacked past the group's ack timeout) with their delivery count raised, then new
  entries. An entry already delivered max_deliver times is dead-lettered instead of
  delivered again. Creates the group (at the beginning of the stream) when missing.
  A retried poll (same poll id) gets back what that poll was handed, not new entries;
  with count 0 only that, never a fresh read (a partitioned read replays every partition
  before it reads any afresh).
  New entries are recorded as one batch (lib/stream.lua, "Batches"); batches fallen due
  become per-entry redeliveries, and the reader's oldest fully acked batches are forgotten.
  KEYS[1] log         STREAM  the records (the group lives here)
  KEYS[2] config      HASH    the group's settings
  KEYS[3] due         ZSET    entry id -> ms when it is to be delivered again
  KEYS[4] deliveries  HASH    entry id -> msgpack {o owner, c consumer, nk nacked}
  KEYS[5] dead        STREAM  the group's dead letters
  KEYS[6] polls       HASH    poll id -> msgpack {ids, tokens} handed to that poll
  KEYS[7] poll_times  ZSET    poll id -> ms (memos are forgotten after two minutes)
  KEYS[8] owners      HASH    owner id -> ms since it is suspected gone (0: not)
  KEYS[9] owned       ZSET    "<owner>\0<entry id>": the deliveries each owner holds
  KEYS[10] batches    ZSET    "<owner>\0<lo>\0<hi>\0<consumer>" (score 0): batches read
  KEYS[11] batch_due  ZSET    batch -> ms when its entries still unacked are due again
  ARGV[1] group
  ARGV[2] consumer
  ARGV[3] owner     the reading process's owner id
  ARGV[4] count     at most this many entries (1..1000); 0: only replay poll_id's memo
  ARGV[5] poll_id   '' or an id the caller reuses when it retries this poll
  Returns {status, wait_ms, n, (id, token, payload, headers) * n}
          status: OK; wait_ms: ms until the next entry falls due again, or -1
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/stream.lua
--@include lib/polls.lua
--@include lib/checked.lua
local k = {log = KEYS[1], config = KEYS[2]}
local g = {due = KEYS[3], deliveries = KEYS[4], dead = KEYS[5], owners = KEYS[8],
  owned = KEYS[9], batches = KEYS[10], batch_due = KEYS[11]}
local polls = KEYS[6]
local poll_times = KEYS[7]
local group = ARGV[1]
local consumer = ARGV[2]
local owner = ARGV[3]
local count = arg_int(ARGV[4], 0, BATCH_MAX)
local poll_id = ARGV[5]

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if owner == '' then return {ST_BAD_ARG, 3} end
if not count then return {ST_BAD_ARG, 4} end

local now = now_ms()
local out = {ST_OK, -1, 0}

local ack_timeout_ms, max_deliver

local function wait_ms()
  local at
  local keys = {g.due}
  if ack_timeout_ms > 0 then keys[2] = g.batch_due end  -- else a batch's time is not a due
  for _, key in ipairs(keys) do
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #first > 0 and (not at or tonumber(first[2]) < at) then at = tonumber(first[2]) end
  end
  if not at then return -1 end
  return math.max(at - now, 0)
end

local function hand_out(id, token, fields)
  out[3] = out[3] + 1
  group_hand_out(out, id, token, fields)
end

group_ensure(k.log, k.config, group, now)
ack_timeout_ms, max_deliver = group_settings(k.config)

-- A retried poll: answer with what this poll id was handed, where still this delivery.
-- When none of it is still delivered to us (acked, or taken back), read afresh, unless
-- asked for the replay only (count 0).
local asked = poll_recall(polls, poll_times, poll_id, now)
if asked then
  for i = 1, #asked.ids do
    local id, token = asked.ids[i], asked.tokens[i]
    local p = group_pending_entry(k.log, group, id)
    local fields = p and p[2] == consumer and p[4] == token and stream_entry(k.log, id)
    if fields then hand_out(id, token, fields) end
  end
  local _, lo, hi = batch_split(asked.b or '')
  if lo then
    local held = {}
    for _, p in ipairs(batch_held(k.log, group, lo, hi, consumer)) do held[p[1]] = true end
    if next(held) then
      for _, entry in ipairs(redis.call('XRANGE', k.log, lo, hi)) do
        if held[entry[1]] then hand_out(entry[1], 1, entry[2]) end
      end
    end
  end
end
if out[3] > 0 or count == 0 then
  out[2] = wait_ms()
  return out
end

local memo = poll_memo()
local function deliver(id, token, fields)
  hand_out(id, token, fields)
  poll_memo_add(memo, id, token)
end

-- Batches past their ack timeout: their entries still unacked become due on their own
-- (with the ack timeout off: recorded on their own, not due).
local turned = 0
while turned < count do
  local first = redis.call('ZRANGE', g.batch_due, '-inf', now, 'BYSCORE', 'LIMIT', 0, 1,
    'WITHSCORES')
  if #first == 0 then break end
  local at = first[2]
  if ack_timeout_ms <= 0 then at = nil end
  turned = turned + batch_expand(k.log, g, group, first[1], at) + 1
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
    local entries = read[1][2]
    if #entries > 0 then
      local lo, hi = entries[1][1], entries[#entries][1]
      local past = redis.call('HGET', k.config, BATCHED_TO)
      if past and not stream_id_before(past, lo) then
        -- The cursor was moved back (XGROUP SETID, the group created again): Redis hands
        -- out entries read before as first deliveries, which an earlier batch may still
        -- name. Each is recorded on its own, so that batch never answers for it again.
        for _, entry in ipairs(entries) do
          group_track(g, entry[1], consumer, owner, now, ack_timeout_ms)
          deliver(entry[1], 1, entry[2])
        end
      else
        memo.b = batch_record(g, owner, consumer, lo, hi, now, ack_timeout_ms)
        for _, entry in ipairs(entries) do hand_out(entry[1], 1, entry[2]) end
      end
      if not past or stream_id_before(past, hi) then
        redis.call('HSET', k.config, BATCHED_TO, hi)
      end
    end
  end
end
batches_settle(k.log, g, group, owner, 2)

poll_remember(polls, poll_times, poll_id, memo, now)
out[2] = wait_ms()
return out
