--[[ queue_enqueue
  Add one message to a plain queue, ready at once in its priority's FIFO place, and wake
  the queue's waiting consumers.
  KEYS[1] meta    HASH  seq: the last sequence number handed out; stat:* counters
  KEYS[2] msgs    HASH  seq -> msgpack record (lib/message.lua)
  KEYS[3] bodies  HASH  seq -> payload bytes
  KEYS[4] ready   ZSET  seq -> priority * 2^45 + seq
  KEYS[5] wake    CHANNEL  sharded channel announcing messages to take
  ARGV[1] priority  0 .. 255, lower is taken first
  ARGV[2] payload   bytes
  Returns {status, seq}   status: OK
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/message.lua
local k = {meta = KEYS[1], msgs = KEYS[2], bodies = KEYS[3], ready = KEYS[4], wake = KEYS[5]}
local priority = arg_int(ARGV[1], 0, PRIORITY_MAX)
local payload = ARGV[2]

if not priority then return {ST_BAD_ARG, 1} end

local seq = redis.call('HINCRBY', k.meta, 'seq', 1)
msg_make_ready(k, seq, {p = priority, t = now_ms(), d = 0, m = 0})
redis.call('HSET', k.bodies, seq, payload)
redis.call('SPUBLISH', k.wake, '1')
return {ST_OK, seq}
