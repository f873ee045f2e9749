--[[ lib/message
  Messages of a plain queue (client.queue): a msgpack record per message in `msgs`
  (p priority, t enqueued ms, d deliveries so far, ever: the token, only grows; b the
  value of d at its last requeue from the dead letters, absent until one; m delivery
  limit of the current delivery, counted from b; o owner holding it, x ms it was
  dead-lettered), its payload in `bodies`, and
  the message's place: `ready` (priority, then FIFO), `leases` (delivered, invisible until
  the deadline) or `dead`. Helpers take the keys they touch from the caller's KEYS table.
  A record the scripts cannot use (it does not decode, or a number they count with is
  not one) reads as false: the script sets it aside (msg_aside) with its payload and goes
  on, answering BAD_RECORD for it where it was named.
]]
--@include lib/status.lua
--@include lib/owners.lua
--@include lib/priority.lua
--@include lib/record.lua
--@include lib/checked.lua


-- Most messages one call delivers, lists or settles; the longest visibility timeout; the
-- highest delivery limit a dequeue may set.
local MSG_MAX_COUNT = 1000
local MSG_MAX_VISIBILITY_MS = 43200000
local MSG_MAX_DELIVERIES = 1000

-- The record `raw` and whether it is a message record the scripts can compute with:
-- priority, enqueued ms, deliveries and limit numbers; the requeue mark and dead-letter
-- time numbers and the owner a string when there. By arithmetic and comparisons, as
-- run_unpack_from (lib/run.lua) does; raises for bytes that are not a msgpack map: run
-- under pcall.
local function msg_unpack(raw)
  local m, more = cmsgpack.unpack(raw)
  local p, t, d, lim, b, x, o, q = m.p, m.t, m.d, m.m, m.b, m.x, m.o, m.q
  return m, more == nil and p == p + 0 and t == t + 0 and d == d + 0 and lim == lim + 0
    and (b == nil or b == b + 0) and (x == nil or x == x + 0) and (o == nil or o >= '')
    and (q == nil or q == q + 0)
end

-- The message record `raw` decoded: its table, or false and why the scripts cannot use it.
local function msg_decode(raw)
  local ok, m, fine = pcall(msg_unpack, raw)
  if ok and fine then return m end
  local decoded, why = record_decode(raw)
  if not decoded then return false, why end
  return false, 'not a message record: priority, time, deliveries, limit or owner not of its type'
end

-- The record of message `seq`: nil when there is none; false, why and its bytes when it
-- is not one the scripts can use (msg_decode).
local function msg_load(msgs_key, seq)
  return record_load(msgs_key, seq, msg_decode)
end

-- Set aside the record `raw` of message `seq` (not usable: `why`) into k.quarantine with
-- its payload, and take the message out of the queue: its record, its payload and its
-- place in each of the sets k names (ready, leases, dead). Listed in k.aside when the
-- script has one.
local function msg_aside(k, seq, raw, why)
  record_aside_item(k, 'message', seq, raw, why, k.msgs, k.bodies, {'ready', 'leases', 'dead'})
end

-- Make a message ready to be delivered, in its priority's FIFO place (its queue order
-- `q`; a message queued by an older version has none: its seq was its order).
local function msg_make_ready(k, seq, m)
  m.o = nil
  record_save(k.msgs, seq, m)
  redis.call('ZADD', k.ready, priority_score(m.p, m.q or tonumber(seq)), seq)
end

-- A delivery ended without an ack (nack, visibility timeout, owner gone): the message is
-- ready again, or dead-lettered once it has been delivered its limit of times since its
-- last requeue (d - b: d itself never goes back, it is the token).
-- Returns 1 when it became ready, 0 when it went to the dead letters.
local function msg_release(k, seq, m, now)
  redis.call('ZREM', k.leases, seq)
  owned_drop(k.owned, m.o, seq)
  if m.d - (m.b or 0) >= m.m then
    m.o = nil
    m.x = now
    record_save(k.msgs, seq, m)
    redis.call('ZADD', k.dead, now, seq)
    return 0
  end
  msg_make_ready(k, seq, m)
  return 1
end

-- Take back up to `limit` deliveries whose visibility deadline has passed.
-- Returns how many became ready again.
local function msg_expire(k, now, limit)
  local seqs = redis.call('ZRANGE', k.leases, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  local ready, expired = 0, 0
  for _, seq in ipairs(seqs) do
    local m, why, raw = msg_load(k.msgs, seq)
    if m then
      expired = expired + 1
      ready = ready + msg_release(k, seq, m, now)
    elseif m == false then
      msg_aside(k, seq, raw, why)
    else
      redis.call('ZREM', k.leases, seq)
    end
  end
  if expired > 0 then redis.call('HINCRBY', k.meta, 'stat:reclaimed_deadline', expired) end
  return ready
end

-- Is `m` delivered to `owner` now, as delivery `token` (0: any delivery of that owner)?
local function msg_held_by(k, seq, m, owner, token)
  if m.o ~= owner or not redis.call('ZSCORE', k.leases, seq) then return false end
  return token == 0 or m.d == token
end

-- The reply entries of one message: seq, payload, enqueued ms, deliveries, priority.
local function msg_reply(out, bodies_key, seq, m)
  out[#out + 1] = tonumber(seq)
  out[#out + 1] = redis.call('HGET', bodies_key, seq) or ''
  out[#out + 1] = m.t
  out[#out + 1] = m.d
  out[#out + 1] = m.p
end

-- The per-seq answer for a report (ack / nack) on a message that is not held as asked:
-- delivered elsewhere or not delivered (STALE), gone within the span of seqs the counter
-- handed out since it was made (OK: acked already), or outside it (NOT_FOUND: never
-- handed out, or handed out before Redis lost the data that held it); BAD_RECORD for one whose record
-- was set aside (m false).
local function msg_unheld_status(meta_key, seq, m)
  if m then return ST_STALE end
  if m == false then return ST_BAD_RECORD end
  local n = tonumber(seq)
  local span = redis.call('HMGET', meta_key, 'seq0', 'seq')
  local first, last = tonumber(span[1]) or 1, tonumber(span[2]) or 0
  if n and n >= first and n <= last and n == math.floor(n) then return ST_OK end
  return ST_NOT_FOUND
end

-- Parse a msgpack array of sequence numbers (integers 1 .. 2^53, at most `limit`) and
-- one of tokens (the same length; integers 0 .. 2^53, 0: none). Returns seqs (as text)
-- and tokens, or nil, nil and which of the two is malformed: 'seqs' or 'tokens'.
local function msg_parse_reports(packed_seqs, packed_tokens, limit)
  local seqs, tokens = arg_array(packed_seqs, limit), arg_array(packed_tokens, limit)
  if not seqs then return nil, nil, 'seqs' end
  for i = 1, #seqs do
    local seq = arg_int(seqs[i], 1, INT_MAX)
    if not seq then return nil, nil, 'seqs' end
    seqs[i] = string.format('%d', seq)
  end
  if not tokens or #tokens ~= #seqs then return nil, nil, 'tokens' end
  for i = 1, #tokens do
    local token = arg_int(tokens[i], 0, INT_MAX)
    if not token then return nil, nil, 'tokens' end
    tokens[i] = token
  end
  return seqs, tokens
end

-- The reply of a listing: {OK, n, messages...} for up to `count` seqs of `set_key` (a
-- message whose record the scripts cannot use is left out: a listing changes nothing).
local function msg_list(msgs_key, bodies_key, set_key, count)
  local out = {ST_OK, 0}
  for _, seq in ipairs(redis.call('ZRANGE', set_key, 0, count - 1)) do
    local m = msg_load(msgs_key, seq)
    if m then
      msg_reply(out, bodies_key, seq, m)
      out[2] = out[2] + 1
    end
  end
  return out
end
