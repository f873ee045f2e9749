--[[ worker_quarantine_replay
  Put a worker record set aside (lib/workers.lua) back in the registry: the record given
  (the one set aside, or a fixed one) under its worker id, taken out of the quarantine.
  Refused when the worker registered again since (its live record wins).
  KEYS[1] quarantine  STREAM  the namespace's records set aside (lib/record.lua)
  KEYS[2] workers     HASH  worker_id -> msgpack record
  KEYS[3] worker_ids  ZSET  worker ids
  ARGV[1] entry_id  the quarantine entry's id
  ARGV[2] record    the worker record to put back
  Returns {status}   status: OK | NOT_FOUND (no such quarantine entry) | OUT_OF_RANGE (not
          a worker record) | BAD_ARG | BAD_RECORD (the record does not decode) | CONFLICT (the
          worker is registered again)
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/workers.lua
local quarantine_key = KEYS[1]
local workers_key = KEYS[2]
local worker_ids_key = KEYS[3]
local entry_id = ARGV[1]
local record = ARGV[2]

if not arg_stream_id(entry_id) then return {ST_BAD_ARG, 1} end
local aside = record_set_aside(quarantine_key, entry_id)
if not aside then return {ST_NOT_FOUND} end
if aside[1] ~= 'worker' then return {ST_OUT_OF_RANGE} end
if not worker_decode(record) then return {ST_BAD_RECORD} end
local worker_id = aside[2]
if redis.call('HEXISTS', workers_key, worker_id) == 1 then return {ST_CONFLICT} end
redis.call('HSET', workers_key, worker_id, record)
redis.call('ZADD', worker_ids_key, 0, worker_id)
redis.call('XDEL', quarantine_key, entry_id)
return {ST_OK}
