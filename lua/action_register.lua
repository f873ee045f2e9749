--[[ action_register
  Register an action, or replace its settings (the last registration wins).
  KEYS[1] definition HASH  the action's settings
  ARGV[1] settings  msgpack map of setting name -> integer or string; timeout_ms and
                    max_retries given, and each setting lib/action.lua reads in its range
  Returns {status}   status: OK (lib/status.lua)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/action.lua
--@include lib/inputs.lua
local definition_key = KEYS[1]
local settings = arg_map(ARGV[1])

local function valid(s)
  if not (s and s.timeout_ms and s.max_retries) then return false end
  for name, value in pairs(s) do
    if type(name) ~= 'string' or (type(value) ~= 'string' and type(value) ~= 'number') then
      return false
    end
  end
  if not inputs_setting_valid(s.keep_inputs) then return false end
  return not action_settings({s.timeout_ms, s.max_retries, s.backoff_ms, s.backoff_max_ms,
    s.max_concurrency, s.max_payload, s.retention_ms, s.retention_count, s.rate_max,
    s.rate_per_ms, s.flow_concurrency, s.flow_rate_max, s.flow_rate_per_ms}).bad
end
if not valid(settings) then return {ST_BAD_ARG, 1} end

local now = now_ms()
-- Replaced in place (not deleted, then written): a caller lacking a right (ACL) is
-- refused at the first write, before anything of the registration it replaces is gone.
local stale = {}
for _, name in ipairs(redis.call('HKEYS', definition_key)) do
  if name ~= 'registered_at_ms' and settings[name] == nil then stale[#stale + 1] = name end
end
if #stale > 0 and not redis.acl_check_cmd('HDEL', definition_key, unpack(stale)) then
  redis.call('HDEL', definition_key, unpack(stale))  -- refused: Redis names the right
end
local fields = {'registered_at_ms', now}
for name, value in pairs(settings) do
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end
redis.call('HSET', definition_key, unpack(fields))
if #stale > 0 then redis.call('HDEL', definition_key, unpack(stale)) end
return {ST_OK}
