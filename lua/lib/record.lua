--[[ lib/record
  Records kept as msgpack maps in a hash field (runs, queue messages, workers): the one
  codec for all of them. A missing field reads as nil.
]]
local function record_load(hash_key, field)
  local raw = redis.call('HGET', hash_key, field)
  if not raw then return nil end
  return cmsgpack.unpack(raw)
end

local function record_save(hash_key, field, rec)
  redis.call('HSET', hash_key, field, cmsgpack.pack(rec))
end
