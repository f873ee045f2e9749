--[[ lib/stream
  Stream records and consumer-group bookkeeping for the stream_* and group_* scripts.
  A record is a stream entry with fields p (payload) and, when it has headers, h (msgpack
  map). A group is a Redis consumer group on the stream (its cursor and pending entries
  list, whose delivery counter is the entry's fencing token) plus the group's keys: config
  (settings), due (entry id -> ms when it is to be delivered again), deliveries (entry id ->
  msgpack {o owner, c consumer, nk 1 once nacked}) and dead (dead-letter stream).
  Entries a group_read takes past the group's cursor are recorded once for the whole batch
  (batches, batch_due; see "Batches" below), not per entry: an entry has its own due time
  and delivery record only once it is an exception (redelivered, nacked, claimed, timed
  out or taken back from a gone owner).
  A delivery record that does not decode (lib/record.lua) reads as none: it only says who
  holds the delivery, which the pending entries list still tells; it goes with the
  entry's ack, as any delivery record.
]]
--@include lib/owners.lua
--@include lib/checked.lua
--@include lib/record.lua

local GROUP_ACK_TIMEOUT_MS = 30000
local GROUP_MAX_DELIVER = 10
local GROUP_DEAD_MAX_LEN = 10000

-- Payload and headers ('' when none) of an entry's flat field list.
local function stream_fields(fields)
  local payload, headers = '', ''
  for i = 1, #fields, 2 do
    if fields[i] == 'p' then
      payload = fields[i + 1]
    elseif fields[i] == 'h' then
      headers = fields[i + 1]
    end
  end
  return payload, headers
end

-- Append a record (payload, headers: '' for none) to the stream and count its bytes in
-- the stream's meta hash. Returns the new entry's id.
local function stream_add(log_key, meta_key, payload, headers)
  local id
  if headers == '' then
    id = redis.call('XADD', log_key, '*', 'p', payload)
  else
    id = redis.call('XADD', log_key, '*', 'p', payload, 'h', headers)
  end
  redis.call('HINCRBY', meta_key, 'bytes', #payload + #headers)
  return id
end

-- Bytes a record holds (payload and headers), as counted in the stream's meta hash.
local function stream_size(fields)
  local payload, headers = stream_fields(fields)
  return #payload + #headers
end

-- The field list of the entry `id`, or nil when it is not (or no longer) in the stream.
local function stream_entry(log_key, id)
  local found = redis.call('XRANGE', log_key, id, id)
  if #found == 0 then return nil end
  return found[1][2]
end

-- How many records were ever appended to the stream (Redis's entries-added counter).
local function stream_added(log_key)
  local info = redis.call('XINFO', 'STREAM', log_key)
  for i = 1, #info, 2 do
    if info[i] == 'entries-added' then return tonumber(info[i + 1]) end
  end
  return 0
end

-- The group's settings: ack timeout (0 = never redeliver on timeout) and max deliveries;
-- one that does not parse (written by hand) reads as its default.
local function group_settings(config_key)
  local v = redis.call('HMGET', config_key, 'ack_timeout_ms', 'max_deliver')
  return arg_int(v[1], 0, U32_MAX) or GROUP_ACK_TIMEOUT_MS,
    arg_int(v[2], 1, U32_MAX) or GROUP_MAX_DELIVER
end

-- Is `group` (an argument) the group whose config key is `config_key`
-- (flo_redis._wire.keys: '...:g:<group>:cfg')? Redis refuses a command naming a group the
-- stream lacks, so a script is never handed one that its keys do not name.
local function group_named(config_key, group)
  local suffix = ':g:' .. group .. ':cfg'
  return group ~= '' and #config_key > #suffix and string.sub(config_key, -#suffix) == suffix
end

-- Whether the group exists: its config hash and its stream are both there.

local function group_exists(log_key, config_key)
  return redis.call('EXISTS', config_key) == 1 and redis.call('EXISTS', log_key) == 1
end

-- Create the group if it is missing, at the beginning of the stream (an empty stream is
-- created when there is none). Returns 1 when it was created.
local function group_ensure(log_key, config_key, group, now)
  if group_exists(log_key, config_key) then return 0 end
  local reply = redis.pcall('XGROUP', 'CREATE', log_key, group, '0', 'MKSTREAM')
  if type(reply) == 'table' and reply.err then
    if not string.find(reply.err, 'BUSYGROUP', 1, true) then error(reply.err) end
  end
  redis.call('HSETNX', config_key, 'created_ms', now)
  return 1
end

-- The pending entry `id` as {id, consumer, idle_ms, delivery_count}, or nil.
local function group_pending_entry(log_key, group, id)
  local found = redis.call('XPENDING', log_key, group, id, id, 1)
  if #found == 0 then return nil end
  return found[1]
end

-- Stream id `a` sorts before `b` (both "ms-seq" as Redis writes them: decimal digits, no
-- leading zeros). Compared as strings, without parsing: a timestamp of fewer digits is
-- smaller; with the '-' at the same place and the same length, string order is id order;
-- of two lengths, the timestamps decide when they differ, else the shorter sequence.
local function stream_id_before(a, b)
  local at, bt = string.find(a, '-', 1, true), string.find(b, '-', 1, true)
  if not (at and bt) then return a < b end
  if at ~= bt then return at < bt end
  if #a == #b or string.sub(a, 1, at) ~= string.sub(b, 1, bt) then return a < b end
  return #a < #b
end

-- The pending entries of `ids`: a map id -> {id, consumer, idle_ms, delivery_count},
-- without the ids not pending. With `consumer`, one read of that consumer's own pending
-- list over the ids' range (at most `scan` entries) finds its entries at once; only an
-- id not found there is looked up on its own (another consumer's, or not pending).
local function group_pending_many(log_key, group, ids, consumer, scan)
  local found = {}
  local missing = ids
  if consumer ~= '' and #ids > 1 then
    local lo, hi = ids[1], ids[1]
    for _, id in ipairs(ids) do
      if stream_id_before(id, lo) then lo = id end
      if stream_id_before(hi, id) then hi = id end
    end
    for _, p in ipairs(redis.call('XPENDING', log_key, group, lo, hi, scan, consumer)) do
      found[p[1]] = p
    end
    missing = {}
    for _, id in ipairs(ids) do
      if not found[id] then missing[#missing + 1] = id end
    end
  end
  for _, id in ipairs(missing) do
    found[id] = group_pending_entry(log_key, group, id)
  end
  return found
end

-- Is a report about the pending entry p ({id, consumer, idle_ms, delivery_count}) stale?
-- It names the delivery's token (its delivery count; '' for flo's token-less reports,
-- never stale) and its consumer ('' for any): a report on an entry delivered again since,
-- or to another consumer, is stale and changes nothing.
local function group_stale(p, token, consumer)
  return token ~= '' and (p[4] ~= tonumber(token) or (consumer ~= '' and p[2] ~= consumer))
end

-- The delivery record of `id`: {o owner, c consumer, nk}, {} when there is none (or it
-- does not decode; an owner that is not a string reads as none).
local function group_delivery(deliveries_key, id)
  local raw = redis.call('HGET', deliveries_key, id)
  local rec = raw and record_decode(raw)
  if not rec then return {} end
  if type(rec.o) ~= 'string' then rec.o = nil end
  return rec
end

-- The owners recorded for `ids` (nil where an entry has no delivery record), in one read.
local function group_delivery_owners(deliveries_key, ids)
  local owners = {}
  local raw = redis.call('HMGET', deliveries_key, unpack(ids))
  for i = 1, #ids do
    local rec = raw[i] and record_decode(raw[i])
    if rec and type(rec.o) == 'string' then owners[i] = rec.o end
  end
  return owners
end

-- Drop the owner index entries of `ids` whose delivery records name an owner.
local function group_drop_owned(g, ids)
  if not g.owned then return end
  local owners = group_delivery_owners(g.deliveries, ids)
  local entries = {}
  for i = 1, #ids do
    if owners[i] then entries[#entries + 1] = owned_entry(owners[i], ids[i]) end
  end
  if #entries > 0 then redis.call('ZREM', g.owned, unpack(entries)) end
end

-- Record a delivery of `id` (one handed out again: redelivered or claimed) to
-- consumer/owner and schedule its redelivery on ack timeout. The owner index (g.owned,
-- g.owners; lib/owners.lua) follows the delivery's owner.
local function group_track(g, id, consumer, owner, now, ack_timeout_ms)
  group_drop_owned(g, {id})
  redis.call('HSET', g.deliveries, id, cmsgpack.pack({o = owner, c = consumer}))
  if g.owned and owner ~= '' then
    redis.call('ZADD', g.owned, 0, owned_entry(owner, id))
    redis.call('HSETNX', g.owners, owner, 0)
  end
  if ack_timeout_ms > 0 then
    redis.call('ZADD', g.due, string.format('%d', now + ack_timeout_ms), id)
  else
    redis.call('ZREM', g.due, id)
  end
end

-- Forget the bookkeeping of entries (at most 1000) that left the pending list. With
-- `owner` (optional: who most likely held them, e.g. the acking process), their index
-- entries under that owner are dropped first; only when that does not account for every
-- entry are the delivery records read to find the other owners.
local function group_untrack(g, ids, owner)
  if #ids == 0 then return end
  if g.owned and owner and owner ~= '' then
    local mine = {}
    for i, id in ipairs(ids) do mine[i] = owned_entry(owner, id) end
    if redis.call('ZREM', g.owned, unpack(mine)) < #ids then group_drop_owned(g, ids) end
  else
    group_drop_owned(g, ids)
  end
  redis.call('ZREM', g.due, unpack(ids))
  redis.call('HDEL', g.deliveries, unpack(ids))
end

-- Ack `id` in the group and move its record to the dead letters, with its delivery count
-- and the reason. An entry whose record was trimmed is only acked.
local function group_bury(log_key, g, group, id, count, consumer, reason, now)
  local fields = stream_entry(log_key, id)
  if fields then
    local payload, headers = stream_fields(fields)
    local owner = group_delivery(g.deliveries, id).o or ''
    local args = {'XADD', g.dead, 'MAXLEN', '~', GROUP_DEAD_MAX_LEN, '*',
      'id', id, 'p', payload, 'n', count, 'r', reason, 'c', consumer, 'o', owner, 't', now}
    if headers ~= '' then
      args[#args + 1] = 'h'
      args[#args + 1] = headers
    end
    redis.call(unpack(args))
  end
  redis.call('XACK', log_key, group, id)
  group_untrack(g, {id})
end

-- Deliver the pending entry `id` (delivered `count` times so far) again, to `consumer`.
-- Returns its field list, or nil when its record was trimmed (then it is forgotten).
local function group_redeliver(log_key, g, group, id, count, consumer, owner, now, ack_timeout_ms)
  local claimed = redis.call('XCLAIM', log_key, group, consumer, 0, id, 'RETRYCOUNT', count + 1)
  local entry = claimed[1]
  if not entry or not entry[2] then
    redis.call('XACK', log_key, group, id)
    group_untrack(g, {id})
    return nil
  end
  group_track(g, id, consumer, owner, now, ack_timeout_ms)
  return entry[2]
end

-- Append one handed-out entry to a reply: id, token (delivery count), payload, headers.
local function group_hand_out(out, id, token, fields)
  local payload, headers = stream_fields(fields)
  out[#out + 1] = id
  out[#out + 1] = token
  out[#out + 1] = payload
  out[#out + 1] = headers
end

--[[ Batches. The entries one group_read takes past the group's cursor are consecutive
  in the stream: every entry between the first (lo) and the last (hi) id was handed out
  by that read. The batch is one member "<owner>\0<lo>\0<hi>\0<consumer>" of g.batches
  (score 0: one owner's batches form one lexicographic range, for reclaim) and of
  g.batch_due (score: ms when its entries still unacked are due again, delivery time +
  ack timeout; with the ack timeout off, delivery time + BATCH_KEEP_MS, when they are
  recorded on their own, not due). An entry of the batch is still that delivery while it
  is pending with delivery count 1: every later hand-out (redelivery, claim) raises the
  count and records the entry on its own, so a batch never speaks for an entry handed
  out again.
]]
local BATCH_SEP = '\0'
local BATCH_MAX = 1000  -- a read takes at most this many entries, so a batch holds as many
local BATCH_KEEP_MS = 30000
local BATCHED_TO = 'batched_to'  -- config field: the last id a batch was recorded up to

local function batch_id(owner, lo, hi, consumer)
  return owner .. BATCH_SEP .. lo .. BATCH_SEP .. hi .. BATCH_SEP .. consumer
end

-- owner, lo, hi, consumer of a batch member (nil when it is not one).
local function batch_split(b)
  return string.match(b, '^(.-)%z(.-)%z(.-)%z(.*)$')
end

-- Record the batch of entries lo..hi just read past the cursor by consumer/owner, due
-- again at now + ack_timeout_ms (with the ack timeout off: kept as a batch until
-- now + BATCH_KEEP_MS). Returns its member.
local function batch_record(g, owner, consumer, lo, hi, now, ack_timeout_ms)
  local b = batch_id(owner, lo, hi, consumer)
  local keep = ack_timeout_ms
  if keep <= 0 then keep = BATCH_KEEP_MS end
  redis.call('ZADD', g.batches, 0, b)
  redis.call('ZADD', g.batch_due, string.format('%d', now + keep), b)
  if owner ~= '' and g.owners then redis.call('HSETNX', g.owners, owner, 0) end
  return b
end

local function batch_forget(g, b)
  redis.call('ZREM', g.batches, b)
  redis.call('ZREM', g.batch_due, b)
end

-- The entries of batch lo..hi still pending from its delivery (count 1), as the PEL's
-- {id, consumer, idle_ms, delivery_count} rows; with `consumer`, only that consumer's.
local function batch_held(log_key, group, lo, hi, consumer)
  local rows
  if consumer then
    rows = redis.call('XPENDING', log_key, group, lo, hi, BATCH_MAX, consumer)
  else
    rows = redis.call('XPENDING', log_key, group, lo, hi, BATCH_MAX)
  end
  local held = {}
  for _, p in ipairs(rows) do
    if p[4] == 1 then held[#held + 1] = p end
  end
  return held
end

-- Record the entries of batch `b` still pending from its delivery on their own, each
-- with its delivery record, and forget the batch: due at `at` (or sooner, where they
-- already were: a nack), or with `at` nil (the ack timeout is off) not due but indexed
-- under the batch's owner. Returns how many entries it recorded.
local function batch_expand(log_key, g, group, b, at)
  local owner, lo, hi, consumer = batch_split(b)
  local n = 0
  if owner then
    local held = batch_held(log_key, group, lo, hi)
    if #held > 0 then
      -- An entry with a record naming an owner was recorded on its own since (read again
      -- after the cursor moved back): its record, not the batch, speaks for it.
      local ids = {}
      for i, p in ipairs(held) do ids[i] = p[1] end
      local recorded = group_delivery_owners(g.deliveries, ids)
      local record = cmsgpack.pack({o = owner, c = consumer})
      local index = {'ZADD', g.due, 'LT'}
      if not at then index = {'ZADD', g.owned} end
      for i, id in ipairs(ids) do
        if not recorded[i] then
          redis.call('HSETNX', g.deliveries, id, record)
          index[#index + 1] = at or 0
          index[#index + 1] = at and id or owned_entry(owner, id)
          n = n + 1
        end
      end
      if n > 0 then redis.call(unpack(index)) end
    end
  end
  batch_forget(g, b)
  return n
end

-- Forget the oldest `limit` batches of `owner` that have nothing pending left (all
-- acked). A batch whose first pending entry was handed out again is left for later
-- (its due time or a reclaim settles it): one lookup per batch, whatever its size.
local function batches_settle(log_key, g, group, owner, limit)
  local mine = redis.call('ZRANGE', g.batches, '[' .. owner .. BATCH_SEP,
    '(' .. owner .. '\1', 'BYLEX', 'LIMIT', 0, limit)
  for _, b in ipairs(mine) do
    local _, lo, hi = batch_split(b)
    if lo and #redis.call('XPENDING', log_key, group, lo, hi, 1) == 0 then
      batch_forget(g, b)
    end
  end
end

-- Forget the bookkeeping of acked entries (at most 1000) that have any: an entry read
-- in a batch and acked on that delivery has none of its own. `owner` as group_untrack.
local function group_untrack_recorded(g, ids, owner)
  if #ids == 0 or redis.call('HLEN', g.deliveries) == 0 then return end
  local raw = redis.call('HMGET', g.deliveries, unpack(ids))
  local recorded = {}
  for i = 1, #ids do
    if raw[i] then recorded[#recorded + 1] = ids[i] end
  end
  if #recorded > 0 then group_untrack(g, recorded, owner) end
end
