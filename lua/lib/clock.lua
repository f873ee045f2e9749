--[[ lib/clock
  Server time in milliseconds. Scripts read it once and reuse it.
]]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
