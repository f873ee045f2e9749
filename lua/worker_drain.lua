--[[ worker_drain
  Tell a worker to drain: its polls are refused with WORKER_DRAINING from now on, while
  reports for runs it holds are still accepted. Sticky until it registers again.
  KEYS[1] workers  HASH  worker_id -> msgpack record
  KEYS[2] worker_ids ZSET  worker ids
  KEYS[3] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] worker_id
  Returns {status, task_types...}   status: OK | NOT_FOUND | BAD_RECORD (its record does
          not decode: it was set aside); the actions the worker serves
          (their queues' parks of it are ended next: action_unpark)
]]
--@include lib/status.lua
--@include lib/workers.lua
local workers_key = KEYS[1]
local worker_ids_key = KEYS[2]
local quarantine_key = KEYS[3]
local worker_id = ARGV[1]

local rec, why, raw = worker_load(workers_key, worker_id)
if rec == false then
  worker_aside(quarantine_key, workers_key, worker_ids_key, worker_id, raw, why)
  return {ST_BAD_RECORD}
end
if not rec then return {ST_NOT_FOUND} end
rec.st = WORKER_DRAINING
record_save(workers_key, worker_id, rec)
return {ST_OK, unpack(rec.tt or {})}
