--[[ queue_ack
  Acknowledge messages: each one delivered to `owner` (as the delivery its token names,
  when one is given) is removed for good. Each seq is answered on its own: OK (removed,
  or already acked earlier: a resent ack changes nothing), STALE (not delivered to this
  owner now, or delivered again since that token: nothing changes) or NOT_FOUND (never
  handed out).
  KEYS[1] meta    HASH  seq counter; stat:* counters
  KEYS[2] msgs    HASH  seq -> msgpack record (lib/message.lua)
  KEYS[3] bodies  HASH  seq -> payload bytes
  KEYS[4] leases  ZSET  seq -> visibility deadline ms
  KEYS[5] owned   ZSET  "<owner>\0<seq>" (score 0): the deliveries each owner holds
  KEYS[6] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] owner   the consumer process the messages were delivered to
  ARGV[2] seqs    msgpack array of sequence numbers (at most 1000)
  ARGV[3] tokens  msgpack array, same length: delivery count each ack is for (0: any)
  Returns {status, n, status_1, ..., status_n}   status: OK;
          status_i: OK | STALE | NOT_FOUND | BAD_RECORD (its record does not decode: it
          was set aside)
]]
--@include lib/status.lua
--@include lib/message.lua
local k = {meta = KEYS[1], msgs = KEYS[2], bodies = KEYS[3], leases = KEYS[4], owned = KEYS[5],
  quarantine = KEYS[6]}
local owner = ARGV[1]
local seqs = ARGV[2]
local tokens = ARGV[3]
local malformed
seqs, tokens, malformed = msg_parse_reports(seqs, tokens, MSG_MAX_COUNT)

if malformed then return {ST_BAD_ARG, malformed == 'seqs' and 2 or 3} end

local out = {ST_OK, #seqs}
local stale = 0
for i, seq in ipairs(seqs) do
  local m, why, raw = msg_load(k.msgs, seq)
  if m == false then msg_aside(k, seq, raw, why) end
  if m and msg_held_by(k, seq, m, owner, tokens[i]) then
    redis.call('ZREM', k.leases, seq)
    owned_drop(k.owned, owner, seq)
    redis.call('HDEL', k.msgs, seq)
    redis.call('HDEL', k.bodies, seq)
    out[#out + 1] = ST_OK
  else
    local st = msg_unheld_status(k.meta, seq, m)
    if st == ST_STALE then stale = stale + 1 end
    out[#out + 1] = st
  end
end
if stale > 0 then redis.call('HINCRBY', k.meta, 'stat:stale_refused', stale) end
return out
