--[[ lib/action
  An action's registered settings, read from its `def` hash. Each is an integer in its
  range (lib/checked.lua); one that does not parse (written by hand, or by another
  version) reads as its default, the same as when it is absent, and its name is the
  action's `bad`. Scripts that hand out or create work (claims, invokes, hand-offs,
  schedules) refuse such an action with ST_BAD_SETTING until it is registered again;
  the others carry on under the defaults, so runs already out still end.
]]
--@include lib/checked.lua
-- What a registration stores when given no options (ActionRegisterOptions' defaults).
local ACTION_TIMEOUT_MS = 30000
local ACTION_MAX_RETRIES = 3

-- The settings in HMGET reply `v` (fields in action_load's order), as integers; `bad`:
-- the name of the first that does not parse, or nil.
local function action_settings(v)
  local bad
  local function int(i, name, low, high, default)
    if not v[i] then return default end
    local n = arg_int(v[i], low, high)
    if n then return n end
    bad = bad or name
    return default
  end
  local action = {
    timeout_ms = int(1, 'timeout_ms', 0, U32_MAX, ACTION_TIMEOUT_MS),
    max_retries = int(2, 'max_retries', 0, U32_MAX, ACTION_MAX_RETRIES),
    backoff_ms = int(3, 'backoff_ms', 0, U32_MAX, 0),
    backoff_max_ms = int(4, 'backoff_max_ms', 0, U32_MAX, 0),
    max_concurrency = int(5, 'max_concurrency', 0, U32_MAX, 0),
    max_payload = int(6, 'max_payload', 0, INT_MAX, -1),
    retention_ms = int(7, 'retention_ms', 0, INT_MAX, -1),
    retention_count = int(8, 'retention_count', 0, INT_MAX, -1),
    -- At most rate_max starts in any rate_per_ms window (0: no rate limit).
    rate_max = int(9, 'rate_max', 0, 10000, 0),
    rate_per_ms = int(10, 'rate_per_ms', 0, 86400000, 0),
    -- At most this many runs of one flow key running at once (0: no limit; lib/flow.lua).
    flow_concurrency = int(11, 'flow_concurrency', 0, U32_MAX, 0),
    -- At most flow_rate_max starts of one flow key in any flow_rate_per_ms (0: none).
    flow_rate_max = int(12, 'flow_rate_max', 0, 10000, 0),
    flow_rate_per_ms = int(13, 'flow_rate_per_ms', 0, 86400000, 0),
  }
  action.bad = bad
  return action
end

local function action_load(def_key)
  local v = redis.call('HMGET', def_key, 'timeout_ms', 'max_retries', 'backoff_ms',
    'backoff_max_ms', 'max_concurrency', 'max_payload', 'retention_ms', 'retention_count',
    'rate_max', 'rate_per_ms', 'flow_concurrency', 'flow_rate_max', 'flow_rate_per_ms')
  if not v[1] then return nil end
  return action_settings(v)
end

-- What an invoke reads before it writes: max_retries and max_payload only (nil when the
-- action is not registered), marked `lean`. Each field an HMGET answers costs a script
-- about half a microsecond, so an invoke reads the other settings (action_load) only to
-- hand its run to a parked poller (lib/handoff.lua).
local function action_load_lean(def_key)
  local v = redis.call('HMGET', def_key, 'max_retries', 'max_payload')
  if not v[1] then return nil end
  local max_retries = arg_int(v[1], 0, U32_MAX)
  local max_payload = v[2] and arg_int(v[2], 0, INT_MAX)
  local action = {max_retries = max_retries or ACTION_MAX_RETRIES,
    max_payload = max_payload or -1, lean = true}
  if not max_retries then action.bad = 'max_retries'
  elseif max_payload == nil then action.bad = 'max_payload' end
  return action
end
