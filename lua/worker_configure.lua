--[[ worker_configure
  Set the namespace's worker health settings, shared by every client: a worker silent
  past heartbeat_timeout_ms is UNHEALTHY and refused work; past remove_after_ms it is
  removed from the registry. A setting left out keeps the stored one (its default when
  none is stored, or the stored one does not parse). Refused, with nothing written, when
  the removal would come before the heartbeat timeout: a worker is first marked
  unhealthy, then removed.
  KEYS[1] config  HASH  namespace settings
  ARGV[1] heartbeat_timeout_ms  100 .. 2^32 - 1, or '' to keep the stored one
  ARGV[2] remove_after_ms       100 .. 2^32 - 1, or '' to keep the stored one
  Returns {status, heartbeat_timeout_ms, remove_after_ms}, the settings in force, or
          those refused   status: OK | OUT_OF_RANGE (remove_after_ms shorter than
          heartbeat_timeout_ms; nothing written)
]]
--@include lib/status.lua
--@include lib/workers.lua
local config_key = KEYS[1]
local heartbeat_timeout_ms = arg_int_or_none(ARGV[1], 100, U32_MAX)
local remove_after_ms = arg_int_or_none(ARGV[2], 100, U32_MAX)

if heartbeat_timeout_ms == nil then return {ST_BAD_ARG, 1} end
if remove_after_ms == nil then return {ST_BAD_ARG, 2} end

local stored_timeout, stored_removal = workers_settings(config_key)
local timeout = heartbeat_timeout_ms or stored_timeout
local removal = remove_after_ms or stored_removal
if removal < timeout then return {ST_OUT_OF_RANGE, timeout, removal} end

local fields = {}
if heartbeat_timeout_ms then
  fields[#fields + 1] = 'heartbeat_timeout_ms'
  fields[#fields + 1] = timeout
end
if remove_after_ms then
  fields[#fields + 1] = 'remove_after_ms'
  fields[#fields + 1] = removal
end
if #fields > 0 then redis.call('HSET', config_key, unpack(fields)) end
return {ST_OK, timeout, removal}
