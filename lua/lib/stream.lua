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

-- Record a delivery of `id` to consumer/owner and schedule its redelivery on ack timeout.
-- The owner index (g.owned, g.owners; lib/owners.lua) follows the delivery's owner.
local function group_track(g, id, consumer, owner, now, ack_timeout_ms)
  owned_drop(g.owned, group_delivery(g.deliveries, id).o, id)
  redis.call('HSET', g.deliveries, id, cmsgpack.pack({o = owner, c = consumer}))
  if g.owned and owner ~= '' then
    redis.call('ZADD', g.owned, 0, owned_entry(owner, id))
    redis.call('HSETNX', g.owners, owner, 0)
  end
  if ack_timeout_ms > 0 then
    redis.call('ZADD', g.due, now + ack_timeout_ms, id)
  else
    redis.call('ZREM', g.due, id)
  end
end

-- Forget the bookkeeping of entries that left the pending list.
local function group_untrack(g, ids)
  if #ids == 0 then return end
  if g.owned then
    for _, id in ipairs(ids) do owned_drop(g.owned, group_delivery(g.deliveries, id).o, id) end
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
