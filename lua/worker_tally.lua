--[[ worker_tally
  Add to a worker's counters: its load when it takes or finishes runs, and its completed
  and failed totals. The load never goes below zero. Unknown workers are ignored.
  KEYS[1] workers  HASH  worker_id -> msgpack record
  ARGV[1] worker_id
  ARGV[2] load_delta
  ARGV[3] completed_delta
  ARGV[4] failed_delta
  Returns {status}   status: OK | NOT_FOUND
]]
--@include lib/status.lua
--@include lib/workers.lua
local workers_key = KEYS[1]
local worker_id = ARGV[1]
local load_delta = tonumber(ARGV[2])
local completed_delta = tonumber(ARGV[3])
local failed_delta = tonumber(ARGV[4])

local rec = worker_load(workers_key, worker_id)
if not rec then return {ST_NOT_FOUND} end
rec.cl = math.max(0, rec.cl + load_delta)
rec.tc = rec.tc + completed_delta
rec.tf = rec.tf + failed_delta
worker_save(workers_key, worker_id, rec)
return {ST_OK}
