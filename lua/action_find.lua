--[[ action_find
  The runs of one state whose error message holds a text (ASCII letters in any case),
  examined in the order action_runs pages them, at most `step` runs per call: a search
  that goes on from where the last call stopped. Read only.
  KEYS[1] definition HASH  the action's settings (is it registered)
  KEYS[2] runs     HASH  run_id -> msgpack record
  KEYS[3] pending  ZSET  run_id -> queue order
  KEYS[4] delayed  ZSET  run_id -> due ms
  KEYS[5] leases   ZSET  run_id -> lease deadline ms
  KEYS[6] done     ZSET  run_id -> finished ms
  KEYS[7] failed   ZSET  run_id -> finished ms
  ARGV[1] state        pending | delayed | running | completed | failed
  ARGV[2] after_score  the cursor's score (an integer 0 .. 2^53), or '' to start
  ARGV[3] after_id     the cursor's run id (the last run the previous call examined)
  ARGV[4] step         runs examined at most, 1 .. 1000
  ARGV[5] text         1 .. 256 bytes, found in the error message ignoring ASCII case
  ARGV[6] limit        matches answered at most, 1 .. 1000 (the call stops at the last)
  Returns {status, more, last_score, last_id, examined, n, (run_id, score, record) * n}
          status: OK | NO_ACTION; more: 1 when runs follow the last one examined;
          last_score / last_id: the cursor to pass back (the one given when none was
          examined); a record that does not decode is never a match
]]
--@include lib/status.lua
--@include lib/states.lua
--@include lib/checked.lua
local k = {definition = KEYS[1], runs = KEYS[2], pending = KEYS[3], delayed = KEYS[4],
  leases = KEYS[5], done = KEYS[6], failed = KEYS[7]}
local state = ARGV[1]
local after_score = ARGV[2]
local after_id = ARGV[3]
local step = arg_int(ARGV[4], 1, 1000)
local text = ARGV[5]
local limit = arg_int(ARGV[6], 1, 1000)

local set = state_set(k, state)
if not set then return {ST_BAD_ARG, 1} end
after_score = state_cursor_score(after_score)
if not after_score then return {ST_BAD_ARG, 2} end
if not step then return {ST_BAD_ARG, 4} end
if #text < 1 or #text > 256 then return {ST_BAD_ARG, 5} end
if not limit then return {ST_BAD_ARG, 6} end
if redis.call('EXISTS', k.definition) == 0 then return {ST_NO_ACTION} end

local lower, find, sub, byte = string.lower, string.find, string.sub, string.byte
local unpack_record = cmsgpack.unpack
text = lower(text)
local newest_first = state_newest_first(state)
local start, skip_ties = state_page_start(set, after_score, after_id, newest_first)
local page
if newest_first then
  page = redis.call('ZRANGE', set, start, start + step, 'REV', 'WITHSCORES')
else
  page = redis.call('ZRANGE', set, start, start + step, 'WITHSCORES')
end

-- The msgpack string that starts at `at` in `raw` (a str header, then its bytes), or nil.
local function str_at(raw, at)
  local tag = byte(raw, at)
  if not tag then return nil end
  local len, from
  if tag >= 0xa0 and tag <= 0xbf then
    len, from = tag - 0xa0, at + 1
  elseif tag == 0xd9 then
    len, from = byte(raw, at + 1), at + 2
  elseif tag == 0xda then
    local a, b = byte(raw, at + 1, at + 2)
    if b then len, from = a * 256 + b, at + 3 end
  elseif tag == 0xdb then
    local a, b, c, d = byte(raw, at + 1, at + 4)
    if d then len, from = ((a * 256 + b) * 256 + c) * 256 + d, at + 5 end
  end
  if not len then return nil end
  return sub(raw, from, from + len - 1)
end

-- Whether the stored record `raw` is a run whose error message holds the text. Only
-- the strings that follow the bytes of the key "err" are lowered and looked at (never
-- the whole record, whose output and traceback may be large); a record where one holds
-- the text is decoded, and its `err` decides.
local function matches(raw)
  if not raw then return false end
  local at = 1
  while true do
    local _, key_end = find(raw, '\163err', at, true)
    if not key_end then return false end
    local candidate = str_at(raw, key_end + 1)
    if candidate and find(lower(candidate), text, 1, true) then
      local ok, run = pcall(unpack_record, raw)
      return ok and type(run) == 'table' and type(run.err) == 'string'
        and find(lower(run.err), text, 1, true) ~= nil
    end
    at = key_end + 1
  end
end

local last_score, last_id = after_score, after_id
local examined, n = 0, 0
local more = 0
local found = {}
for i = 1, #page, 2 do
  local run_id, score = page[i], page[i + 1]
  -- Runs tied with a cursor that left the set, at or before it, come first: passed by,
  -- the cursor moved over them.
  if skip_ties and state_page_passed(run_id, score, after_score, after_id, newest_first) then
    last_score, last_id = score, run_id
  else
    if examined == step or n == limit then
      more = 1
      break
    end
    examined = examined + 1
    last_score, last_id = score, run_id
    local raw = redis.call('HGET', k.runs, run_id)
    if matches(raw) then
      n = n + 1
      found[#found + 1] = run_id
      found[#found + 1] = score
      found[#found + 1] = raw
    end
  end
end
if more == 0 and #page / 2 > step then more = 1 end
local out = {ST_OK, more, last_score, last_id, examined, n}
for i = 1, #found do out[#out + 1] = found[i] end
return out
