--[[ worker_heartbeat
  Record a worker's heartbeat and load. A heartbeat makes an UNHEALTHY worker ACTIVE again
  (a DRAINING one stays DRAINING). A worker silent past the namespace's removal delay is
  removed, and its heartbeat answers NOT_FOUND: it must register again.
  KEYS[1] config   HASH  namespace settings
  KEYS[2] workers  HASH  worker_id -> msgpack record
  KEYS[3] worker_ids ZSET  worker ids
  KEYS[4] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] worker_id
  ARGV[2] current_load  0 .. 2^32 - 1
  Returns {status, worker_status}   status: OK | NOT_FOUND | BAD_RECORD (its record does
          not decode: it was set aside; register again)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/workers.lua
local config_key = KEYS[1]
local workers_key = KEYS[2]
local worker_ids_key = KEYS[3]
local quarantine_key = KEYS[4]
local worker_id = ARGV[1]
local current_load = arg_int(ARGV[2], 0, U32_MAX)

if not current_load then return {ST_BAD_ARG, 2} end

local rec, why, raw = worker_load(workers_key, worker_id)
if rec == false then
  worker_aside(quarantine_key, workers_key, worker_ids_key, worker_id, raw, why)
  return {ST_BAD_RECORD}
end
if not rec then return {ST_NOT_FOUND} end
local now = now_ms()
local hb_timeout, remove_after = workers_settings(config_key)
if worker_status(rec, now, hb_timeout, remove_after) == WORKER_REMOVED then
  worker_remove(workers_key, worker_ids_key, worker_id)
  return {ST_NOT_FOUND}
end
rec.hb = now
rec.cl = current_load
record_save(workers_key, worker_id, rec)
return {ST_OK, rec.st}
