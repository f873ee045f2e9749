--[[ dashboard_session_touch
  A request of a logged-in browser: its session, if it has not ended, is kept for
  another idle period, never past its absolute end.
  KEYS[1] session  STRING  the session's start ms; expires at its end
  ARGV[1] idle_ms  a session unused this long ends, 1..2^53
  ARGV[2] max_ms   a session ends this long after its start, used or not, 1..2^53
  Returns {status, ends_ms}   status: OK | NOT_FOUND (ended, logged out or never opened)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/num.lua
--@include lib/checked.lua
local session_key = KEYS[1]
local idle_ms = arg_int(ARGV[1], 1, INT_MAX)
local max_ms = arg_int(ARGV[2], 1, INT_MAX)

if not idle_ms then return {ST_BAD_ARG, 1} end
if not max_ms then return {ST_BAD_ARG, 2} end

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
