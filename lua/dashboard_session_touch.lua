--[[ dashboard_session_touch
  A request of a logged-in browser: its session, if it has not ended, is kept for
  another idle period, never past its absolute end.
  KEYS[1] session  STRING  the session's start ms; expires at its end
  ARGV[1] idle_ms  a session unused this long ends
  ARGV[2] max_ms   a session ends this long after its start, used or not
  Returns {status, ends_ms}   status: OK | NOT_FOUND (ended, logged out or never opened)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/num.lua
local session_key = KEYS[1]
local idle_ms = tonumber(ARGV[1])
local max_ms = tonumber(ARGV[2])

local started = tonumber(redis.call('GET', session_key))
if not started then
  redis.call('DEL', session_key)  -- an unreadable value is no session either
  return {ST_NOT_FOUND, 0}
end
local now = now_ms()
local ends = math.min(now + idle_ms, started + max_ms)
if ends <= now then
  redis.call('DEL', session_key)
  return {ST_NOT_FOUND, 0}
end
redis.call('PEXPIREAT', session_key, num_arg(ends))
return {ST_OK, ends}
