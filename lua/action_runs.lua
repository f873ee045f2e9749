--[[ action_runs
  One page of an action's runs in one state, with their records. Waiting runs come in the
  order they will be taken (pending: queue order; delayed: due time; running: lease
  deadline), finished ones newest first. Read only; at most `limit` runs per call.
  KEYS[1] runs     HASH  run_id -> msgpack record
  KEYS[2] pending  ZSET  run_id -> queue order
  KEYS[3] delayed  ZSET  run_id -> due ms
  KEYS[4] leases   ZSET  run_id -> lease deadline ms
  KEYS[5] done     ZSET  run_id -> finished ms
  KEYS[6] failed   ZSET  run_id -> finished ms
  ARGV[1] state        pending | delayed | running | completed | failed
  ARGV[2] after_score  the cursor's score (an integer 0 .. 2^53), or '' for the first page
  ARGV[3] after_id     the cursor's run id (the last run of the previous page)
  ARGV[4] limit        1 .. 1024
  Returns {status, more, n, (run_id, score, record) * n}   status: OK;
          more: 1 when runs follow the last one; score: the run's score in its set
]]
--@include lib/status.lua
--@include lib/states.lua
--@include lib/checked.lua
local k = {runs = KEYS[1], pending = KEYS[2], delayed = KEYS[3], leases = KEYS[4],
  done = KEYS[5], failed = KEYS[6]}
local state = ARGV[1]
local after_score = ARGV[2]
local after_id = ARGV[3]
local limit = arg_int(ARGV[4], 1, 1024)

local set = state_set(k, state)
if not set then return {ST_BAD_ARG, 1} end
after_score = state_cursor_score(after_score)
if not after_score then return {ST_BAD_ARG, 2} end
if not limit then return {ST_BAD_ARG, 4} end

local newest_first = state_newest_first(state)

-- Where the page starts: just past the cursor's run while it is still in the set with the
-- same score; else at the first run ordered after (score, id).
local start, skip_ties = state_page_start(set, after_score, after_id, newest_first)

local page
if newest_first then
  page = redis.call('ZRANGE', set, start, start + limit, 'REV', 'WITHSCORES')
else
  page = redis.call('ZRANGE', set, start, start + limit, 'WITHSCORES')
end
local out = {ST_OK, 0, 0}
for i = 1, #page, 2 do
  local run_id, score = page[i], page[i + 1]
  local passed = skip_ties
    and state_page_passed(run_id, score, after_score, after_id, newest_first)
  if not passed then
    if out[3] == limit then break end
    out[3] = out[3] + 1
    out[#out + 1] = run_id
    out[#out + 1] = score
    out[#out + 1] = redis.call('HGET', k.runs, run_id) or ''
  end
end
if #page / 2 > limit then out[2] = 1 end
return out
