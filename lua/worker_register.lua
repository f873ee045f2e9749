--[[ worker_register
  Register a worker, or replace its record (counters start again at zero).
  KEYS[1] workers  HASH  worker_id -> msgpack record
  KEYS[2] worker_ids ZSET  worker ids, for paging in id order
  ARGV[1] worker_id
  ARGV[2] rec      the worker's record, msgpack map: wt, mc, mid, md, tt (lib/workers.lua)
  Returns {status}   status: OK
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/workers.lua
local workers_key = KEYS[1]
local worker_ids_key = KEYS[2]
local worker_id = ARGV[1]
local rec = cmsgpack.unpack(ARGV[2])

local now = now_ms()
rec.st = WORKER_ACTIVE
rec.cl = 0
rec.tc = 0
rec.tf = 0
rec.ra = now
rec.hb = now
worker_save(workers_key, worker_id, rec)
redis.call('ZADD', worker_ids_key, 0, worker_id)
return {ST_OK}
