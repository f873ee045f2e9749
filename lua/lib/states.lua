--[[ lib/states
  The set each queue state lives in, by the name operators use (action_runs,
  action_find, action_purge): pending, delayed, running, completed, failed; and where a
  page of one starts after a cursor (action_runs, action_find).
]]
--@include lib/checked.lua
local function state_set(k, state)
  if state == 'pending' then return k.pending end
  if state == 'delayed' then return k.delayed end
  if state == 'running' then return k.leases end
  if state == 'completed' then return k.done end
  if state == 'failed' then return k.failed end
  return nil
end

-- A cursor's score argument as the decimal its set compares ('' stays ''), or nil when
-- it is not an integer 0 .. INT_MAX.
local function state_cursor_score(after_score)
  if after_score == '' then return '' end
  local score = arg_int(after_score, 0, INT_MAX)
  if not score then return nil end
  return string.format('%d', score)
end

-- Finished runs are paged newest first, waiting and running ones in the order they go.
local function state_newest_first(state)
  return state == 'completed' or state == 'failed'
end

-- Where a page of `set` starts after the cursor (after_score, a decimal string or ''
-- for the first page, and after_id): the rank just past the cursor's run while it is
-- still in the set with the same score; else the rank of the first run scored after it,
-- and then true: runs tied with the cursor's score come first and must be skipped up to
-- its id (state_page_passed).
local function state_page_start(set, after_score, after_id, newest_first)
  if after_score == '' then return 0, false end
  local score = redis.call('ZSCORE', set, after_id)
  if score and tonumber(score) == tonumber(after_score) then
    if newest_first then return redis.call('ZREVRANK', set, after_id) + 1, false end
    return redis.call('ZRANK', set, after_id) + 1, false
  end
  if newest_first then return redis.call('ZCOUNT', set, '(' .. after_score, '+inf'), true end
  return redis.call('ZCOUNT', set, '-inf', '(' .. after_score), true
end

-- Whether the run (run_id, score) of a page that skips ties lies at or before the
-- cursor: a run the previous page already covered.
local function state_page_passed(run_id, score, after_score, after_id, newest_first)
  if tonumber(score) ~= tonumber(after_score) then return false end
  if newest_first then return run_id >= after_id end
  return run_id <= after_id
end
