--[[ dashboard_login
  A log-in attempt at a dashboard, throttled. While the attempt's client address, or
  the dashboard as a whole, had its limit of failed log-ins within the window, the
  attempt is refused whatever its token; otherwise a right token opens a session and a
  wrong one is counted as a failure of both.
  KEYS[1] failures          ZSET    attempt id -> ms: the dashboard's failed log-ins
  KEYS[2] address_failures  ZSET    attempt id -> ms: the failed log-ins of one address
  KEYS[3] session           STRING  the session's start ms; expires at its end
  ARGV[1] right          1: the token was the dashboard's, 0: it was not
  ARGV[2] attempt_id     unique per attempt
  ARGV[3] window_ms      how long a failure counts, 1..2^31
  ARGV[4] address_limit  failures one address may have within the window, 1..10000
  ARGV[5] total_limit    failures all addresses may have within the window, 1..10000
  ARGV[6] idle_ms        a session unused this long ends, 1..2^53
  ARGV[7] max_ms         a session ends this long after its start, used or not, 1..2^53
  Returns {status, ms}   status: OK (a session opened; ms: when it ends unless used)
                         | CONFLICT (a wrong token, counted) | OUT_OF_RANGE (throttled;
                         ms: until the oldest counted failure stops counting)
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/num.lua
--@include lib/checked.lua
local failures_key = KEYS[1]
local address_failures_key = KEYS[2]
local session_key = KEYS[3]
local right = arg_flag(ARGV[1])
local attempt_id = ARGV[2]
local window_ms = arg_int(ARGV[3], 1, 2147483648)
local address_limit = arg_int(ARGV[4], 1, 10000)
local total_limit = arg_int(ARGV[5], 1, 10000)
local idle_ms = arg_int(ARGV[6], 1, INT_MAX)
local max_ms = arg_int(ARGV[7], 1, INT_MAX)

if right == nil then return {ST_BAD_ARG, 1} end
if not window_ms then return {ST_BAD_ARG, 3} end
if not address_limit then return {ST_BAD_ARG, 4} end
if not total_limit then return {ST_BAD_ARG, 5} end
if not idle_ms then return {ST_BAD_ARG, 6} end
if not max_ms then return {ST_BAD_ARG, 7} end

local now = now_ms()
local since = num_arg(now - window_ms)
local wait_ms = 0
-- Neither set ever holds more than its limit (a throttled attempt is not counted), so
-- dropping the failures that stopped counting is bounded work.
for _, limited in ipairs({{address_failures_key, address_limit}, {failures_key, total_limit}}) do
  local key, limit = limited[1], limited[2]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. since)
  if redis.call('ZCARD', key) >= limit then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    wait_ms = math.max(wait_ms, tonumber(oldest[2]) + window_ms - now)
  end
end
if wait_ms > 0 then return {ST_OUT_OF_RANGE, wait_ms} end

if right then
  local ends = now + math.min(idle_ms, max_ms)
  redis.call('SET', session_key, num_arg(now), 'PXAT', num_arg(ends))
  return {ST_OK, ends}
end
for _, key in ipairs({address_failures_key, failures_key}) do
  redis.call('ZADD', key, num_arg(now), attempt_id)
  redis.call('PEXPIRE', key, num_arg(window_ms))
end
return {ST_CONFLICT, 0}
