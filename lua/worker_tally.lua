--[[ worker_tally
  Add to a worker's counters: its load when it takes or finishes runs, and its completed
  and failed totals. The load never goes below zero. Unknown workers are ignored.
  KEYS[1] workers  HASH  worker_id -> msgpack record
  KEYS[2] worker_ids ZSET  worker ids
  KEYS[3] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] worker_id
  ARGV[2] load_delta       -(2^32 - 1) .. 2^32 - 1, as the two below
  ARGV[3] completed_delta
  ARGV[4] failed_delta
  Returns {status}   status: OK | NOT_FOUND | BAD_RECORD (its record does not decode: it
          was set aside)
]]
--@include lib/status.lua
--@include lib/workers.lua
local workers_key = KEYS[1]
local worker_ids_key = KEYS[2]
local quarantine_key = KEYS[3]
local worker_id = ARGV[1]
local load_delta = arg_int(ARGV[2], -U32_MAX, U32_MAX)
local completed_delta = arg_int(ARGV[3], -U32_MAX, U32_MAX)
local failed_delta = arg_int(ARGV[4], -U32_MAX, U32_MAX)

if not load_delta then return {ST_BAD_ARG, 2} end
if not completed_delta then return {ST_BAD_ARG, 3} end
if not failed_delta then return {ST_BAD_ARG, 4} end

local rec, why, raw = worker_load(workers_key, worker_id)
if rec == false then
  worker_aside(quarantine_key, workers_key, worker_ids_key, worker_id, raw, why)
  return {ST_BAD_RECORD}
end
if not rec then return {ST_NOT_FOUND} end
rec.cl = math.max(0, rec.cl + load_delta)
rec.tc = rec.tc + completed_delta
rec.tf = rec.tf + failed_delta
record_save(workers_key, worker_id, rec)
return {ST_OK}
