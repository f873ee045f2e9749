--[[ worker_list
  One page of the worker registry in id order, with each worker's current status. Workers
  silent past the removal delay met on the page are removed and left out (left out only,
  for a caller that may not write: a read-only user leaves the removal to the next).
  KEYS[1] config   HASH  namespace settings
  KEYS[2] workers  HASH  worker_id -> msgpack record
  KEYS[3] worker_ids ZSET  worker ids
  KEYS[4] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] after    list ids strictly after this one ('' = from the start)
  ARGV[2] limit    1 .. 1024
  Returns {status, more, last_id, (worker_id, record, worker_status) * n}
          status: OK; more: 1 when ids follow last_id; a worker whose record does not
          decode is set aside, its row (worker_id, why, -2)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/workers.lua
local config_key = KEYS[1]
local workers_key = KEYS[2]
local worker_ids_key = KEYS[3]
local quarantine_key = KEYS[4]
local after = ARGV[1]
local limit = arg_int(ARGV[2], 1, 1024)

if not limit then return {ST_BAD_ARG, 2} end

local low = '-'
if after ~= '' then low = '(' .. after end
local ids = redis.call('ZRANGE', worker_ids_key, low, '+', 'BYLEX', 'LIMIT', 0, limit + 1)
local more = 0
if #ids > limit then
  more = 1
  ids[#ids] = nil
end
local now = now_ms()
local hb_timeout, remove_after = workers_settings(config_key)
local out = {ST_OK, more, ids[#ids] or ''}
for _, worker_id in ipairs(ids) do
  local rec, why, raw = worker_load(workers_key, worker_id)
  local status = WORKER_REMOVED
  if rec then status = worker_status(rec, now, hb_timeout, remove_after) end
  if rec == false then
    -- Set aside where this runs on a primary (a read-only replica refuses: left out).
    if pcall(worker_aside, quarantine_key, workers_key, worker_ids_key, worker_id, raw, why) then
      out[#out + 1] = worker_id
      out[#out + 1] = why
      out[#out + 1] = -2  -- a row set aside (flo_redis/actions/workers.py: SET_ASIDE)
    end
  elseif status == WORKER_REMOVED then
    local removed = redis.pcall('HDEL', workers_key, worker_id)  -- refused to read-only
    if type(removed) ~= 'table' then redis.call('ZREM', worker_ids_key, worker_id) end
  else
    out[#out + 1] = worker_id
    out[#out + 1] = redis.call('HGET', workers_key, worker_id)
    out[#out + 1] = status
  end
end
return out
