--[[ action_delete
  Delete an action with its runs: settings, queue, leases and kept results, and the
  operator counters (lib/tally.lua). The run sequence (meta) is kept so run ids are never
  reused.
  KEYS[1] meta     HASH  counters: the run sequence stays, the tallies go
  KEYS[2..n] data_keys  every data key of the action (flo_redis._wire.keys.ActionKeys.all_data_keys)
  Returns {status, existed}   status: OK; existed: 1 if the action was registered
]]
--@include lib/status.lua
--@include lib/tally.lua
local meta = KEYS[1]
local data = {}
for i = 2, #KEYS do data[#data + 1] = KEYS[i] end

local existed = redis.call('EXISTS', data[1])
redis.call('UNLINK', unpack(data))
redis.call('HDEL', meta, unpack(tally_fields()))
return {ST_OK, existed}
