--[[ worker_register
  Register a worker, or replace its record (counters start again at zero).
  KEYS[1] workers  HASH  worker_id -> msgpack record
  KEYS[2] worker_ids ZSET  worker ids, for paging in id order
  ARGV[1] worker_id
  ARGV[2] rec      the worker's record, msgpack map: wt, mc, mid, md, tt, ow, v, hs, pid
                   (lib/workers.lua); mc 0 .. 2^32 - 1, tt an array of names, mid, md, ow,
                   v and hs text when given, pid 0 .. 2^32 - 1 when given
  Returns {status}   status: OK
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/workers.lua
local workers_key = KEYS[1]
local worker_ids_key = KEYS[2]
local worker_id = ARGV[1]
local rec = arg_map(ARGV[2])

if not (rec and arg_int(rec.wt, 0, 1) and arg_int(rec.mc, 0, U32_MAX)
    and (rec.mid == nil or type(rec.mid) == 'string')
    and (rec.md == nil or type(rec.md) == 'string')
    and (rec.ow == nil or type(rec.ow) == 'string')
    and (rec.v == nil or type(rec.v) == 'string')
    and (rec.hs == nil or type(rec.hs) == 'string')
    and (rec.pid == nil or (type(rec.pid) == 'number' and arg_int(rec.pid, 0, U32_MAX)))
    and (rec.tt == nil or names_ok(rec.tt, INT_MAX))) then

  return {ST_BAD_ARG, 2}
end

local now = now_ms()
rec.st = WORKER_ACTIVE
rec.cl = 0
rec.tc = 0
rec.tf = 0
rec.ra = now
rec.hb = now
record_save(workers_key, worker_id, rec)
redis.call('ZADD', worker_ids_key, 0, worker_id)
return {ST_OK}
