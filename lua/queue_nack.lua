--[[ queue_nack
  Give messages back unprocessed: each one delivered to `owner` (as the delivery its token
  names, when one is given) is ready again at once in its priority's FIFO place, or goes
  to the dead letters once it has been delivered its limit of times. Each seq is answered
  on its own as in queue_ack (a resent nack of a message already given back is STALE).
  KEYS[1] meta    HASH  seq counter; stat:* counters
  KEYS[2] msgs    HASH  seq -> msgpack record (lib/message.lua)
  KEYS[3] ready   ZSET  seq -> priority * 2^45 + queue order
  KEYS[4] leases  ZSET  seq -> visibility deadline ms
  KEYS[5] dead    ZSET  seq -> ms it was dead-lettered
  KEYS[6] owned   ZSET  "<owner>\0<seq>" (score 0): the deliveries each owner holds
  KEYS[7] wake    CHANNEL  sharded channel announcing messages to take
  KEYS[8] bodies  HASH  seq -> payload bytes
  KEYS[9] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] owner   the consumer process the messages were delivered to
  ARGV[2] seqs    msgpack array of sequence numbers (at most 1000)
  ARGV[3] tokens  msgpack array, same length: delivery count each nack is for (0: any)
  Returns {status, n, status_1, ..., status_n}   status: OK;
          status_i: OK | STALE | NOT_FOUND | BAD_RECORD (its record does not decode: it
          was set aside)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/message.lua
local k = {meta = KEYS[1], msgs = KEYS[2], ready = KEYS[3], leases = KEYS[4], dead = KEYS[5],
  owned = KEYS[6], wake = KEYS[7], bodies = KEYS[8], quarantine = KEYS[9]}
local owner = ARGV[1]
local seqs = ARGV[2]
local tokens = ARGV[3]
local malformed
seqs, tokens, malformed = msg_parse_reports(seqs, tokens, MSG_MAX_COUNT)

if malformed then return {ST_BAD_ARG, malformed == 'seqs' and 2 or 3} end

local now = now_ms()
local out = {ST_OK, #seqs}
local ready, stale = 0, 0
for i, seq in ipairs(seqs) do
  local m, why, raw = msg_load(k.msgs, seq)
  if m == false then msg_aside(k, seq, raw, why) end
  if m and msg_held_by(k, seq, m, owner, tokens[i]) then
    ready = ready + msg_release(k, seq, m, now)
    out[#out + 1] = ST_OK
  else
    local st = msg_unheld_status(k.meta, seq, m)
    if st == ST_OK then st = ST_STALE end  -- acked already: nothing to give back
    if st == ST_STALE then stale = stale + 1 end
    out[#out + 1] = st
  end
end
if stale > 0 then redis.call('HINCRBY', k.meta, 'stat:stale_refused', stale) end
if ready > 0 then redis.call('SPUBLISH', k.wake, '1') end
return out
