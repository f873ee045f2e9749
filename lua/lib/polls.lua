--[[ lib/polls
  Poll memos: what a claim handed to a poll id, so that a poll retried after its reply was
  lost gets the same items back instead of new ones (lua/README.md: "Lost replies" under Streams). A memo
  is msgpack {ids, tokens} in the caller's `polls` hash, its time in `poll_times`; memos
  older than POLL_MEMORY_MS are forgotten, a batch per claim.
]]
local POLL_MEMORY_MS = 120000
local POLL_FORGET_BATCH = 100

local function poll_memo()
  return {ids = {}, tokens = {}}
end

local function poll_memo_add(memo, id, token)
  memo.ids[#memo.ids + 1] = id
  memo.tokens[#memo.tokens + 1] = token
end

-- Hand out again what `poll_id` was handed, through replay_one(id, token), which hands
-- out an item the poller still holds and answers true (false: it is no longer the
-- poller's). Returns how many items were handed out again. 0 -- no poll id, no memo, an
-- expired one, or nothing of it still held -- means the caller claims afresh: a retried
-- poll is still a poll, never answered empty while there is work.
local function poll_replay(polls_key, times_key, poll_id, now, replay_one)
  if poll_id == '' then return 0 end
  local raw = redis.call('HGET', polls_key, poll_id)
  local at = tonumber(redis.call('ZSCORE', times_key, poll_id))
  if not raw or not at or at < now - POLL_MEMORY_MS then return 0 end
  local memo = cmsgpack.unpack(raw)
  local n = 0
  for i = 1, #memo.ids do
    if replay_one(memo.ids[i], memo.tokens[i]) then n = n + 1 end
  end
  return n
end

-- Remember what `poll_id` was handed (nothing for an empty memo or no poll id), then
-- forget a batch of memos older than POLL_MEMORY_MS.
local function poll_remember(polls_key, times_key, poll_id, memo, now)
  if poll_id ~= '' and #memo.ids > 0 then
    redis.call('HSET', polls_key, poll_id, cmsgpack.pack(memo))
    redis.call('ZADD', times_key, now, poll_id)
  end
  local old = redis.call('ZRANGE', times_key, '-inf', now - POLL_MEMORY_MS, 'BYSCORE',
    'LIMIT', 0, POLL_FORGET_BATCH)
  if #old > 0 then
    redis.call('HDEL', polls_key, unpack(old))
    redis.call('ZREM', times_key, unpack(old))
  end
end
