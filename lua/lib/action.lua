--[[ lib/action
  An action's registered settings, read from its `def` hash.
]]
local function action_load(def_key)
  local v = redis.call('HMGET', def_key, 'timeout_ms', 'max_retries', 'backoff_ms',
    'backoff_max_ms', 'max_concurrency', 'max_payload', 'retention_ms', 'retention_count',
    'rate_max', 'rate_per_ms')
  if not v[1] then return nil end
  return {
    timeout_ms = tonumber(v[1]),
    max_retries = tonumber(v[2]),
    backoff_ms = tonumber(v[3]) or 0,
    backoff_max_ms = tonumber(v[4]) or 0,
    max_concurrency = tonumber(v[5]) or 0,
    max_payload = tonumber(v[6]) or -1,
    retention_ms = tonumber(v[7]) or -1,
    retention_count = tonumber(v[8]) or -1,
    -- At most rate_max starts in any rate_per_ms window (0: no rate limit).
    rate_max = tonumber(v[9]) or 0,
    rate_per_ms = tonumber(v[10]) or 0,
  }
end

-- What an invoke reads before it writes: max_retries and max_payload only (nil when the
-- action is not registered), marked `lean`. Each field an HMGET answers costs a script
-- about half a microsecond, so an invoke reads the other settings (action_load) only to
-- hand its run to a parked poller (lib/handoff.lua).
local function action_load_lean(def_key)
  local v = redis.call('HMGET', def_key, 'max_retries', 'max_payload')
  if not v[1] then return nil end
  return {max_retries = tonumber(v[1]), max_payload = tonumber(v[2]) or -1, lean = true}
end
