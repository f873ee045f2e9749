--[[ lib/workers
  Worker records: msgpack maps in the namespace's `workers` hash. Fields: wt worker type,
  st stored status (ACTIVE or DRAINING), cl current load, mc max concurrency, tc/tf tasks
  completed/failed, ra registered ms, hb last heartbeat ms, mid machine id, md metadata
  JSON, tt task types, ow the owner id of the process that registered it (its liveness
  channel in the registry's slot says whether that process is still there:
  worker_presence). UNHEALTHY and "removed" are derived from the heartbeat age and the
  namespace's settings (config hash: heartbeat_timeout_ms, remove_after_ms; one that does
  not parse reads as its default).
]]
--@include lib/record.lua
--@include lib/checked.lua
local WORKER_ACTIVE = 0
local WORKER_DRAINING = 2
local WORKER_UNHEALTHY = 3
local WORKER_REMOVED = -1
local DEFAULT_HEARTBEAT_TIMEOUT_MS = 90000
local DEFAULT_REMOVE_AFTER_MS = 300000

local function workers_settings(config_key)
  local v = redis.call('HMGET', config_key, 'heartbeat_timeout_ms', 'remove_after_ms')
  return arg_int(v[1], 0, INT_MAX) or DEFAULT_HEARTBEAT_TIMEOUT_MS,
    arg_int(v[2], 0, INT_MAX) or DEFAULT_REMOVE_AFTER_MS

end

local worker_load, worker_save = record_load, record_save

-- The status a worker has now: removed past remove_after, DRAINING if told to drain,
-- UNHEALTHY past the heartbeat timeout, else ACTIVE.
local function worker_status(rec, now, hb_timeout, remove_after)
  local silent = now - rec.hb
  if silent > remove_after then return WORKER_REMOVED end
  if rec.st == WORKER_DRAINING then return WORKER_DRAINING end
  if silent > hb_timeout then return WORKER_UNHEALTHY end
  return WORKER_ACTIVE
end

local function worker_remove(workers_key, ids_key, worker_id)
  redis.call('HDEL', workers_key, worker_id)
  redis.call('ZREM', ids_key, worker_id)
end
