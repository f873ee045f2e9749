--[[ lib/workers
  Worker records: msgpack maps in the namespace's `workers` hash. Fields: wt worker type,
  st stored status (ACTIVE or DRAINING), cl current load, mc max concurrency, tc/tf tasks
  completed/failed, ra registered ms, hb last heartbeat ms, mid machine id, md metadata
  JSON, tt task types, ow the owner id of the process that registered it (its liveness
  channel in the registry's slot says whether that process is still there:
  worker_presence), v the flo-redis version, hs the host and pid the process id of that
  process (absent in records of older versions). UNHEALTHY and "removed" are derived from the heartbeat age and the
  namespace's settings (config hash: heartbeat_timeout_ms, remove_after_ms; one that does
  not parse reads as its default).
  A record the scripts cannot use (it does not decode, or its times and counters are not
  numbers) reads as false: the script sets it aside (worker_aside) and answers as for a
  worker that is not registered, which registers again.
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

-- The worker record `raw` decoded: its table, or false and why the scripts cannot use it
-- (registered and heartbeat times and counters are numbers; status, metadata, machine id
-- and task types of their types).
local function worker_decode(raw)
  local rec, why = record_decode(raw)
  if not rec then return false, why end
  if type(rec.hb) ~= 'number' or type(rec.ra) ~= 'number' or type(rec.cl) ~= 'number'
      or type(rec.tc) ~= 'number' or type(rec.tf) ~= 'number'
      or (rec.st and type(rec.st) ~= 'number') or (rec.wt and type(rec.wt) ~= 'number')
      or (rec.mc and type(rec.mc) ~= 'number') or (rec.md and type(rec.md) ~= 'string')
      or (rec.mid and type(rec.mid) ~= 'string') or (rec.tt and type(rec.tt) ~= 'table')
      or (rec.v and type(rec.v) ~= 'string') or (rec.hs and type(rec.hs) ~= 'string')
      or (rec.pid and type(rec.pid) ~= 'number') then
    return false, 'not a worker record: times, counters, status or metadata not of their types'
  end
  for _, t in ipairs(rec.tt or {}) do
    if type(t) ~= 'string' then return false, 'not a worker record: a task type not a string' end
  end
  return rec
end

-- The record of `worker_id`: nil when there is none; false, why and its bytes when it is
-- not one the scripts can use (worker_decode).
local function worker_load(workers_key, worker_id)
  return record_load(workers_key, worker_id, worker_decode)
end

-- Set aside the record `raw` of `worker_id` (not usable: `why`) into the namespace's
-- quarantine and take the worker out of the registry: as a removed worker, it registers
-- again at its next heartbeat or poll.
local function worker_aside(quarantine_key, workers_key, ids_key, worker_id, raw, why)
  record_aside(quarantine_key, 'worker', worker_id, raw, why, '')
  redis.call('HDEL', workers_key, worker_id)
  redis.call('ZREM', ids_key, worker_id)
end

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
