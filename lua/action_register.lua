--[[ action_register
  Register an action, or replace its settings (the last registration wins).
  KEYS[1] definition HASH  the action's settings
  ARGV[1] settings  msgpack map of setting name -> integer or string
  Returns {status}   status: OK (lib/status.lua)
]]
--@include lib/status.lua
--@include lib/clock.lua
local definition_key = KEYS[1]
local settings = cmsgpack.unpack(ARGV[1])

local now = now_ms()
redis.call('DEL', definition_key)
local fields = {'registered_at_ms', now}
for name, value in pairs(settings) do
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end
redis.call('HSET', definition_key, unpack(fields))
return {ST_OK}
