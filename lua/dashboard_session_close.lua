--[[ dashboard_session_close
  Log out: the session ends now, for every dashboard process.
  KEYS[1] session  STRING  the session's start ms; expires at its end
  Returns {status}   status: OK | NOT_FOUND (it had ended already)
]]
--@include lib/status.lua
local session_key = KEYS[1]

if redis.call('DEL', session_key) == 0 then return {ST_NOT_FOUND} end
return {ST_OK}
