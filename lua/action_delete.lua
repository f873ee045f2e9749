--[[ action_delete
  Delete an action with its runs: settings, queue, leases and kept results. The run
  sequence (meta) is kept so run ids are never reused.
  KEYS[1..n] every data key of the action (flo_redis.keys.ActionKeys.all_data_keys)
  Returns {status, existed}   status: OK; existed: 1 if the action was registered
]]
--@include lib/status.lua
local existed = redis.call('EXISTS', KEYS[1])
redis.call('UNLINK', unpack(KEYS))
return {ST_OK, existed}
