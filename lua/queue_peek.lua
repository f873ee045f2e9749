--[[ queue_peek
  Look at up to `count` ready messages without taking them, in the order dequeue would
  deliver them. Writes nothing.
  KEYS[1] msgs    HASH  seq -> msgpack record (lib/message.lua)
  KEYS[2] bodies  HASH  seq -> payload bytes
  KEYS[3] ready   ZSET  seq -> priority * 2^45 + queue order
  ARGV[1] count   1 .. 1000
  Returns {status, n, seq_1, payload_1, enqueued_at_1, delivery_count_1, priority_1, ...}
          status: OK
]]
--@include lib/status.lua
--@include lib/message.lua
local msgs_key = KEYS[1]
local bodies_key = KEYS[2]
local ready_key = KEYS[3]
local count = arg_int(ARGV[1], 1, MSG_MAX_COUNT)

if not count then return {ST_BAD_ARG, 1} end

return msg_list(msgs_key, bodies_key, ready_key, count)
