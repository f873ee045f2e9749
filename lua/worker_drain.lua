--[[ worker_drain
  Tell a worker to drain: its polls are refused with WORKER_DRAINING from now on, while
  reports for runs it holds are still accepted. Sticky until it registers again.
  KEYS[1] workers  HASH  worker_id -> msgpack record
  ARGV[1] worker_id
  Returns {status, task_types...}   status: OK | NOT_FOUND; the actions the worker serves
          (their queues' parks of it are ended next: action_unpark)
]]
--@include lib/status.lua
--@include lib/workers.lua
local workers_key = KEYS[1]
local worker_id = ARGV[1]

local rec = worker_load(workers_key, worker_id)
if not rec then return {ST_NOT_FOUND} end
rec.st = WORKER_DRAINING
worker_save(workers_key, worker_id, rec)
return {ST_OK, unpack(rec.tt or {})}
