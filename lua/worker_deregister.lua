--[[ worker_deregister
  Remove a worker's record from the registry.
  KEYS[1] workers  HASH  worker_id -> msgpack record
  KEYS[2] worker_ids ZSET  worker ids
  ARGV[1] worker_id
  Returns {status}   status: OK | NOT_FOUND
]]
--@include lib/status.lua
--@include lib/workers.lua
local workers_key = KEYS[1]
local worker_ids_key = KEYS[2]
local worker_id = ARGV[1]

if redis.call('HEXISTS', workers_key, worker_id) == 0 then return {ST_NOT_FOUND} end
worker_remove(workers_key, worker_ids_key, worker_id)
return {ST_OK}
