--[[ action_flow_keys
  The busiest flow keys of an action (lib/flow.lua), read only and bounded: the keys of
  the first `sample` runs waiting in the queue, of the first `sample` runs held back by
  their key's limit, and of one page of the flows hash, each with its counts; the
  `limit` busiest (waiting seen + held + running) first.
  KEYS[1] definition HASH  the action's settings
  KEYS[2] pending  ZSET  run_id -> queue order
  KEYS[3] runs     HASH  run_id -> msgpack record
  KEYS[4] flows    HASH  "r:<flow key>" -> its runs running (lib/flow.lua)
  KEYS[5] flow_held ZSET  "<flow key>\0<score>\0<run_id>": runs held back by their key's limit
  KEYS[6] flow_rate ZSET  "<flow key>\0<start ms>\0<token>": each key's starts in its window
  ARGV[1] limit    keys answered at most, 1 .. 1000
  ARGV[2] sample   runs (and held runs, and flows fields) looked at, 1 .. 1000
  Returns {status, now_ms, looked, n, (key, waiting, running, held, started,
          paused_until) * n}   status: OK | NO_ACTION; looked: the waiting runs looked at
          (waiting counts a key's runs among them); running: its runs running; held:
          its runs held back by its limit; started: its starts in its rate window (0
          without a per-key rate); paused_until: the end of a RateLimited pause, or 0
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/action.lua
--@include lib/checked.lua
local k = {definition = KEYS[1], pending = KEYS[2], runs = KEYS[3], flows = KEYS[4],
  flow_held = KEYS[5], flow_rate = KEYS[6]}
local limit = arg_int(ARGV[1], 1, 1000)
local sample = arg_int(ARGV[2], 1, 1000)

if not limit then return {ST_BAD_ARG, 1} end
if not sample then return {ST_BAD_ARG, 2} end
local action = action_load(k.definition)
if not action then return {ST_NO_ACTION} end
local now = now_ms()

local seen, order = {}, {}  -- flow key -> runs of it waiting among those looked at
local function note(key, n)
  if seen[key] == nil then
    seen[key] = 0
    order[#order + 1] = key
  end
  seen[key] = seen[key] + n
end

local head = redis.call('ZRANGE', k.pending, 0, sample - 1)
if #head > 0 then
  local raws = redis.call('HMGET', k.runs, unpack(head))
  for i = 1, #raws do
    local run = raws[i] and run_decode(raws[i])
    if run and run.fk then note(run.fk, 1) end
  end
end
for _, entry in ipairs(redis.call('ZRANGE', k.flow_held, '-', '+', 'BYLEX', 'LIMIT', 0, sample)) do
  local key = string.match(entry, '^(.-)%z')
  if key then note(key, 0) end
end
local page = redis.call('HSCAN', k.flows, 0, 'COUNT', sample)[2]
for i = 1, #page, 2 do
  local kind, key = string.match(page[i], '^(%a):(.*)$')
  if kind == 'r' or kind == 'p' then note(key, 0) end
end

local rows = {}
for _, key in ipairs(order) do
  local v = redis.call('HMGET', k.flows, 'r:' .. key, 'p:' .. key)
  local held = redis.call('ZLEXCOUNT', k.flow_held, '[' .. key .. '\0', '(' .. key .. '\1')
  local started = 0
  if action.flow_rate_max > 0 then
    local edge = string.format('%s\0%015d', key, now - action.flow_rate_per_ms + 1)
    started = redis.call('ZLEXCOUNT', k.flow_rate, '[' .. edge, '(' .. key .. '\1')
  end
  local paused = tonumber(v[2]) or 0
  if paused <= now then paused = 0 end
  local running = tonumber(v[1]) or 0
  rows[#rows + 1] = {key, seen[key], running, held, started, paused,
    seen[key] + running + held}
end
table.sort(rows, function(a, b)
  if a[7] ~= b[7] then return a[7] > b[7] end
  return a[1] < b[1]
end)
local out = {ST_OK, now, #head, math.min(limit, #rows)}
for i = 1, math.min(limit, #rows) do
  local row = rows[i]
  for j = 1, 6 do out[#out + 1] = row[j] end
end
return out
