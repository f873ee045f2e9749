--[[ lib/stream
  Stream records and consumer-group bookkeeping for the stream_* and group_* scripts.
  A record is a stream entry with fields p (payload) and, when it has headers, h (msgpack
  map). A group is a Redis consumer group on the stream (its cursor and pending entries
  list, whose delivery counter is the entry's fencing token) plus the group's keys: config
  (settings), due (entry id -> ms when it is to be delivered again), deliveries (entry id ->
  msgpack {o owner, c consumer, nk 1 once nacked}) and dead (dead-letter stream).
]]
--@include lib/owners.lua
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

-- The group's settings: ack timeout (0 = never redeliver on timeout) and max deliveries.
local function group_settings(config_key)
  local v = redis.call('HMGET', config_key, 'ack_timeout_ms', 'max_deliver')
  return tonumber(v[1]) or GROUP_ACK_TIMEOUT_MS, tonumber(v[2]) or GROUP_MAX_DELIVER
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

-- Stream id `a` sorts before `b` ("ms-seq", both exact in a Lua number).
local function stream_id_before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not (am and bm) then return a < b end
  am, bm = tonumber(am), tonumber(bm)
  if am ~= bm then return am < bm end
  return tonumber(as) < tonumber(bs)
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

local function group_delivery(deliveries_key, id)
  local raw = redis.call('HGET', deliveries_key, id)
  if not raw then return {} end
  return cmsgpack.unpack(raw)
end

-- The owners recorded for `ids` (nil where an entry has no delivery record), in one read.
local function group_delivery_owners(deliveries_key, ids)
  local owners = {}
  local raw = redis.call('HMGET', deliveries_key, unpack(ids))
  for i = 1, #ids do
    if raw[i] then owners[i] = cmsgpack.unpack(raw[i]).o end
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

-- Record deliveries of `ids` (at most 1000) to consumer/owner and schedule their
-- redelivery on ack timeout, a few calls for the whole batch. The owner index (g.owned,
-- g.owners; lib/owners.lua) follows each delivery's owner. `fresh`: the ids were just
-- read past the group's cursor, so no earlier delivery of theirs is to be dropped.
-- Scores go to Redis as strings made once (a number is formatted again per argument).
local function group_track_many(g, ids, consumer, owner, now, ack_timeout_ms, fresh)
  if #ids == 0 then return end
  if not fresh then group_drop_owned(g, ids) end
  local record = cmsgpack.pack({o = owner, c = consumer})
  local due_at = string.format('%d', now + ack_timeout_ms)
  local fields, owned, due = {}, {}, {}
  for i, id in ipairs(ids) do
    local at = 2 * i
    fields[at - 1], fields[at] = id, record
    owned[at - 1], owned[at] = '0', owned_entry(owner, id)
    due[at - 1], due[at] = due_at, id
  end
  redis.call('HSET', g.deliveries, unpack(fields))
  if g.owned and owner ~= '' then
    redis.call('ZADD', g.owned, unpack(owned))
    redis.call('HSETNX', g.owners, owner, 0)
  end
  if ack_timeout_ms > 0 then
    redis.call('ZADD', g.due, unpack(due))
  else
    redis.call('ZREM', g.due, unpack(ids))
  end
end

-- Record a delivery of `id` to consumer/owner and schedule its redelivery on ack timeout.
local function group_track(g, id, consumer, owner, now, ack_timeout_ms)
  group_track_many(g, {id}, consumer, owner, now, ack_timeout_ms, false)
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
