--[[ lib/record
  Records kept as msgpack maps in a hash field (runs, queue messages, workers, slot
  holders, poll memos, delivery records, schedules): the one codec for all of them. A
  missing field reads as nil. A field that does not decode to one msgpack map reads as
  false, with the reason and its bytes: never a Lua error, which would stop every caller
  behind it. What the caller does with it is its own: a record that holds work or
  settings is set aside (record_aside) into its scope's `quarantine` stream, with its
  bytes, its reason and the payload that goes with it; a record that only remembers
  (a poll memo, a delivery record) reads as absent.
]]
-- The record `raw` decoded: its table, or false and why it is not a record: one map,
-- nothing after it (cmsgpack answers each object the bytes hold, one after the other;
-- a msgpack nil after the map goes unseen, which no record writer produces).
local function record_decode(raw)
  local ok, rec, more = pcall(cmsgpack.unpack, raw)
  if not ok then return false, 'not msgpack (' .. tostring(rec) .. ')' end
  if type(rec) ~= 'table' then return false, 'not a msgpack map' end
  if more ~= nil then return false, 'bytes left after its msgpack map' end
  return rec
end

-- The record under `field` of hash `hash_key`, decoded by `decode` (a kind's own
-- decoder, such as run_decode; record_decode when nil): nil when there is none; false,
-- why and its bytes when it does not decode.
local function record_load(hash_key, field, decode)
  local raw = redis.call('HGET', hash_key, field)
  if not raw then return nil end
  local rec, why = (decode or record_decode)(raw)
  return rec, why, raw
end

local function record_save(hash_key, field, rec)
  redis.call('HSET', hash_key, field, cmsgpack.pack(rec))
end

-- Set aside the record `raw` of `kind` (run, message, worker, schedule, slot, entry),
-- stored under `field`, with why and the payload that goes with it ('' for none), as one
-- entry of the stream `quarantine_key` (fields k kind, f field, r bytes, why, p payload;
-- its id says when). The caller takes it out of where it was, and reports it (the
-- entry is listed to the caller in `aside`, a table of the call, when given: kind,
-- field, why), so each record set aside is told once.
local function record_aside(quarantine_key, kind, field, raw, why, payload, aside)
  -- The newest 1000 are kept (flo_redis/quarantine.py: KEPT).
  redis.call('XADD', quarantine_key, 'MAXLEN', 1000, '*', 'k', kind, 'f', field,
    'r', raw, 'why', why, 'p', payload or '')
  if aside then
    local n = #aside
    aside[n + 1] = kind
    aside[n + 2] = field
    aside[n + 3] = why
  end
end

-- Set aside the record `raw` of a queued item of `kind` (a run, a message), stored under
-- `field` of `records_key` with its payload under `field` of `payloads_key`, as
-- record_aside does (into k.quarantine, listed in k.aside when the script has one), and
-- take the item out of its queue: its record, its payload, and `field` from each of the
-- sets of `k` that `sets` names and the caller passed.
local function record_aside_item(k, kind, field, raw, why, records_key, payloads_key, sets)
  record_aside(k.quarantine, kind, field, raw, why, redis.call('HGET', payloads_key, field),
    k.aside)
  redis.call('HDEL', records_key, field)
  redis.call('HDEL', payloads_key, field)
  for _, set in ipairs(sets) do
    if k[set] then redis.call('ZREM', k[set], field) end
  end
end

-- The quarantine entry `id` as {kind, field, bytes, why, payload}, or nil.
local function record_set_aside(quarantine_key, id)
  local found = redis.call('XRANGE', quarantine_key, id, id)
  if #found == 0 then return nil end
  local e = {}
  local fields = found[1][2]
  for i = 1, #fields, 2 do e[fields[i]] = fields[i + 1] end
  return {e.k or '', e.f or '', e.r or '', e.why or '', e.p or ''}
end
