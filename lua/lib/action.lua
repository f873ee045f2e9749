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
