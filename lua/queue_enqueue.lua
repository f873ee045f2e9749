--[[ queue_enqueue
  Add one message to a plain queue, ready at once in its priority's FIFO place, and wake
  the queue's waiting consumers.
  KEYS[1] meta    HASH  seq: the last sequence number handed out (lib/ids.lua), seq0:
                        the first since the counter was made; qseq: queue order; stat:*
  KEYS[2] msgs    HASH  seq -> msgpack record (lib/message.lua)
  KEYS[3] bodies  HASH  seq -> payload bytes
  KEYS[4] ready   ZSET  seq -> priority * 2^45 + queue order
  KEYS[5] wake    CHANNEL  sharded channel announcing messages to take
  ARGV[1] priority  0 .. 255, lower is taken first
  ARGV[2] payload   bytes
  Returns {status, seq}   status: OK
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/message.lua
--@include lib/ids.lua
--@include lib/num.lua
local k = {meta = KEYS[1], msgs = KEYS[2], bodies = KEYS[3], ready = KEYS[4], wake = KEYS[5]}
local priority = arg_int(ARGV[1], 0, PRIORITY_MAX)
local payload = ARGV[2]

if not priority then return {ST_BAD_ARG, 1} end

local now = now_ms()
local seq, before = ids_take(k.meta, 'seq', 1, now)
local field = num_arg(seq)
local order = redis.call('HINCRBY', k.meta, 'qseq', 1)
if before == 0 then
  redis.call('HSET', k.meta, 'seq0', field)
elseif order == 1 and before < PRIORITY_SEQ_SPAN then
  -- Messages queued by an older version are ordered by their seq: carry on after them.
  order = before + 1
  redis.call('HSET', k.meta, 'qseq', num_arg(order))
end
msg_make_ready(k, field, {p = priority, t = now, d = 0, m = 0, q = order})
redis.call('HSET', k.bodies, field, payload)
redis.call('SPUBLISH', k.wake, '1')
return {ST_OK, seq}
