--[[ worker_poll
  The gate in front of every poll: may this worker take work now?
  KEYS[1] config   HASH  namespace settings
  KEYS[2] workers  HASH  worker_id -> msgpack record
  KEYS[3] worker_ids ZSET  worker ids
  KEYS[4] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] worker_id
  Returns {status, metadata}
          status: OK | NOT_FOUND (not registered or removed) | UNHEALTHY | DRAINING |
          BAD_RECORD (its record does not decode: it was set aside; register again)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/workers.lua
local config_key = KEYS[1]
local workers_key = KEYS[2]
local worker_ids_key = KEYS[3]
local quarantine_key = KEYS[4]
local worker_id = ARGV[1]

local rec, why, raw = worker_load(workers_key, worker_id)
if rec == false then
  worker_aside(quarantine_key, workers_key, worker_ids_key, worker_id, raw, why)
  return {ST_BAD_RECORD}
end
if not rec then return {ST_NOT_FOUND} end
local hb_timeout, remove_after = workers_settings(config_key)
local status = worker_status(rec, now_ms(), hb_timeout, remove_after)
if status == WORKER_REMOVED then
  worker_remove(workers_key, worker_ids_key, worker_id)
  return {ST_NOT_FOUND}
end
if status == WORKER_DRAINING then return {ST_DRAINING} end
if status == WORKER_UNHEALTHY then return {ST_UNHEALTHY} end
return {ST_OK, rec.md or ''}
