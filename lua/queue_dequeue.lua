--[[ queue_dequeue
  Deliver up to `count` ready messages to `owner`: lowest priority first, FIFO within
  one. Each delivery raises the message's delivery count (its fencing token), records the
  owner, and hides the message until now + visibility_ms; it comes back when nacked, when
  that deadline passes without an ack, or when its owner's process is gone
  (queue_reclaim). First takes back up to 100 deliveries whose deadline has passed. A
  retried poll (same poll_id, within two minutes; lib/polls.lua) is answered with what
  that poll was handed and still holds as that delivery, so a reply lost on the way
  strands nothing; when none of it is still held, it takes afresh.
  KEYS[1] meta    HASH  seq counter; stat:* counters
  KEYS[2] msgs    HASH  seq -> msgpack record (lib/message.lua)
  KEYS[3] bodies  HASH  seq -> payload bytes
  KEYS[4] ready   ZSET  seq -> priority * 2^45 + queue order
  KEYS[5] leases  ZSET  seq -> visibility deadline ms
  KEYS[6] dead    ZSET  seq -> ms it was dead-lettered
  KEYS[7] owners  HASH  owner id -> ms since it is suspected gone (0: not suspected)
  KEYS[8] owned   ZSET  "<owner>\0<seq>" (score 0): the deliveries each owner holds
  KEYS[9] wake    CHANNEL  sharded channel announcing messages to take
  KEYS[10] polls       HASH  poll id -> msgpack {ids, tokens} handed to that poll
  KEYS[11] poll_times  ZSET  poll id -> ms (memos are forgotten after two minutes)
  KEYS[12] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] owner           the consumer process (its liveness channel is held)
  ARGV[2] count           1 .. 1000
  ARGV[3] visibility_ms   1 .. 43200000
  ARGV[4] max_deliveries  1 .. 1000: past this many deliveries a message is dead-lettered
  ARGV[5] poll_id         '' or an id the caller reuses when it retries this poll
  Returns {status, now_ms, next_deadline_ms, n, seq_1, payload_1, enqueued_at_1,
           delivery_count_1, priority_1, ...}
          status: OK; next_deadline_ms: the earliest visibility deadline
          still running (-1: none); then each record this call set aside because it
          does not decode: (kind 'message', field its seq, why) * m
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/message.lua
--@include lib/polls.lua
local k = {meta = KEYS[1], msgs = KEYS[2], bodies = KEYS[3], ready = KEYS[4],
  leases = KEYS[5], dead = KEYS[6], owners = KEYS[7], owned = KEYS[8], wake = KEYS[9]}
local polls = KEYS[10]
local poll_times = KEYS[11]
k.quarantine = KEYS[12]
k.aside = {}
local owner = ARGV[1]
local count = arg_int(ARGV[2], 1, MSG_MAX_COUNT)
local visibility_ms = arg_int(ARGV[3], 1, MSG_MAX_VISIBILITY_MS)
local max_deliveries = arg_int(ARGV[4], 1, MSG_MAX_DELIVERIES)
local poll_id = ARGV[5]
local EXPIRE_BATCH = 100

if owner == '' then return {ST_BAD_ARG, 1} end
if not count then return {ST_BAD_ARG, 2} end
if not visibility_ms then return {ST_BAD_ARG, 3} end
if not max_deliveries then return {ST_BAD_ARG, 4} end

local now = now_ms()
local back = msg_expire(k, now, EXPIRE_BATCH)

local out = {ST_OK, now, -1, 0}
local taken = 0

-- A retried poll: what it was handed and still holds, as that same delivery.
local replayed = poll_replay(polls, poll_times, poll_id, now, function(seq, token)
  local m = msg_load(k.msgs, seq)
  if not (m and msg_held_by(k, seq, m, owner, token)) then return false end
  msg_reply(out, k.bodies, seq, m)
  return true
end)
taken = replayed

local memo = poll_memo()
if replayed == 0 then
  for _, seq in ipairs(redis.call('ZRANGE', k.ready, 0, count - 1)) do
    redis.call('ZREM', k.ready, seq)
    local m, why, raw = msg_load(k.msgs, seq)
    if m == false then
      msg_aside(k, seq, raw, why)
    elseif m then
      m.d = m.d + 1
      m.m = max_deliveries
      m.o = owner
      record_save(k.msgs, seq, m)
      redis.call('ZADD', k.leases, now + visibility_ms, seq)
      redis.call('ZADD', k.owned, 0, owned_entry(owner, seq))
      msg_reply(out, k.bodies, seq, m)
      poll_memo_add(memo, seq, m.d)
      taken = taken + 1
    end
  end
end
poll_remember(polls, poll_times, poll_id, memo, now)
if taken > 0 then redis.call('HSETNX', k.owners, owner, 0) end
out[4] = taken
local first = redis.call('ZRANGE', k.leases, 0, 0, 'WITHSCORES')
if #first > 0 then out[3] = tonumber(first[2]) end
-- Deliveries taken back above that this call did not take: wake the other consumers.
if back > 0 and redis.call('ZCARD', k.ready) > 0 then redis.call('SPUBLISH', k.wake, '1') end
for _, v in ipairs(k.aside) do out[#out + 1] = v end
return out
