--[[ queue_quarantine_replay
  Put a message set aside (lib/message.lua) back in its queue: the record given (the one
  set aside, or a fixed one) and its payload under its seq, ready again in its priority's
  FIFO place (a delivery it was on ended with it), or back in the dead letters when it
  had been dead-lettered; taken out of the quarantine. Wakes waiting consumers.
  KEYS[1] quarantine  STREAM  the queue's records set aside (lib/record.lua)
  KEYS[2] msgs        HASH  seq -> msgpack record (lib/message.lua)
  KEYS[3] bodies      HASH  seq -> payload bytes
  KEYS[4] ready       ZSET  seq -> priority * 2^45 + seq
  KEYS[5] dead        ZSET  seq -> ms it was dead-lettered
  KEYS[6] wake        CHANNEL  sharded channel announcing messages to take
  ARGV[1] entry_id  the quarantine entry's id
  ARGV[2] record    the message record to put back
  Returns {status}   status: OK | NOT_FOUND (no such quarantine entry) | OUT_OF_RANGE (not
          a message) | BAD_ARG | BAD_RECORD (the record does not decode) | CONFLICT (the seq holds
          a message again)
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/message.lua
local k = {quarantine = KEYS[1], msgs = KEYS[2], bodies = KEYS[3], ready = KEYS[4],
  dead = KEYS[5], wake = KEYS[6]}
local entry_id = ARGV[1]
local record = ARGV[2]

if not arg_stream_id(entry_id) then return {ST_BAD_ARG, 1} end
local aside = record_set_aside(k.quarantine, entry_id)
if not aside then return {ST_NOT_FOUND} end
if aside[1] ~= 'message' or not tonumber(aside[2]) then return {ST_OUT_OF_RANGE} end
local m = msg_decode(record)
if not m then return {ST_BAD_RECORD} end
local seq = aside[2]
if redis.call('HEXISTS', k.msgs, seq) == 1 then return {ST_CONFLICT} end
redis.call('HSET', k.bodies, seq, aside[5])
if m.x then
  m.o = nil
  record_save(k.msgs, seq, m)
  redis.call('ZADD', k.dead, m.x, seq)
else
  msg_make_ready(k, seq, m)
  redis.call('SPUBLISH', k.wake, '1')
end
redis.call('XDEL', k.quarantine, entry_id)
return {ST_OK}
