--[[ queue_dlq_requeue
  Move dead letters back to the queue: each named message in the dead letters is ready
  again in its priority's FIFO place with a fresh delivery limit (b = d: the limit counts
  deliveries from here; d, the token, goes on growing, so a report from a delivery
  before is never taken for a later one), and the queue's waiting consumers are woken.
  Each seq is answered on its own: OK, or NOT_FOUND when it is not a dead letter (never
  handed out, acked, or already requeued).
  KEYS[1] meta    HASH  seq counter
  KEYS[2] msgs    HASH  seq -> msgpack record (lib/message.lua)
  KEYS[3] ready   ZSET  seq -> priority * 2^45 + queue order
  KEYS[4] dead    ZSET  seq -> ms it was dead-lettered
  KEYS[5] wake    CHANNEL  sharded channel announcing messages to take
  KEYS[6] bodies  HASH  seq -> payload bytes
  KEYS[7] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] seqs    msgpack array of sequence numbers (at most 1000)
  Returns {status, n, status_1, ..., status_n}   status: OK;
          status_i: OK | NOT_FOUND | BAD_RECORD (its record does not decode: it was set
          aside)
]]
--@include lib/status.lua
--@include lib/message.lua
local k = {meta = KEYS[1], msgs = KEYS[2], ready = KEYS[3], dead = KEYS[4], wake = KEYS[5],
  bodies = KEYS[6], quarantine = KEYS[7]}
local seqs = ARGV[1]
seqs = msg_parse_reports(seqs, seqs, MSG_MAX_COUNT)

if not seqs then return {ST_BAD_ARG, 1} end

local out = {ST_OK, #seqs}
local ready = 0
for _, seq in ipairs(seqs) do
  local m, why, raw = msg_load(k.msgs, seq)
  if m == false and redis.call('ZSCORE', k.dead, seq) then
    msg_aside(k, seq, raw, why)
    out[#out + 1] = ST_BAD_RECORD
  elseif m and redis.call('ZREM', k.dead, seq) == 1 then
    m.b = m.d
    m.x = nil
    msg_make_ready(k, seq, m)
    ready = ready + 1
    out[#out + 1] = ST_OK
  else
    out[#out + 1] = ST_NOT_FOUND
  end
end
if ready > 0 then redis.call('SPUBLISH', k.wake, '1') end
return out
