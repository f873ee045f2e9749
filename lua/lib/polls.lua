--[[ lib/polls
  Poll memos: what a claim handed to a poll id, so that a poll retried after its reply was
  lost gets the same items back instead of new ones (lua/README.md: "Lost replies" under Streams). A memo
  is msgpack {p = poll id, ids, tokens} (group_read adds b, the batch of entries it read
  past the group's cursor) in the caller's `polls` hash, its time in
  `poll_times`; memos older than POLL_MEMORY_MS are forgotten, a batch per claim.
  A poll id "<poller>#<n>" names the n-th poll of one poller, which starts poll n + 1
  only once the reply to poll n arrived: its memo is kept under "<poller>" and replaced
  (or dropped, when nothing was handed) by the poller's next poll. So memos grow with
  the pollers alive, not with the claims made. Any other poll id keeps a memo of its own.
  A memo that does not decode (lib/record.lua) reads as none: it only ever replays a lost
  reply, the poller's next poll replaces it and it is forgotten after POLL_MEMORY_MS,
  while what it named stays held under its leases.
]]
--@include lib/record.lua
local POLL_MEMORY_MS = 120000
local POLL_FORGET_BATCH = 100

-- The field a poll's memo is kept under: its poller for "<poller>#<n>", else the id.
local function poll_field(poll_id)
  return string.match(poll_id, '^(.+)#[^#]*$') or poll_id
end

-- The memo `raw` decoded, or nil when it is not one: ids and tokens (strings or numbers,
-- and numbers), and a batch (group_read) that is a string.
local function poll_memo_decode(raw)
  local memo = record_decode(raw)
  if not memo then return nil end
  local ids, tokens, b = memo.ids, memo.tokens, memo.b
  if type(ids) ~= 'table' or type(tokens) ~= 'table' or (b and type(b) ~= 'string') then
    return nil
  end
  for i = 1, #ids do
    local id = ids[i]
    if (type(id) ~= 'string' and type(id) ~= 'number') or type(tokens[i]) ~= 'number' then
      return nil
    end
  end
  return memo
end

local function poll_memo()
  return {ids = {}, tokens = {}}
end

local function poll_memo_add(memo, id, token)
  local n = #memo.ids + 1
  memo.ids[n] = id
  memo.tokens[n] = token
end

-- Hand out again what `poll_id` was handed, through replay_one(id, token), which hands
-- out an item the poller still holds and answers true (false: it is no longer the
-- poller's). Returns how many items were handed out again. 0 -- no poll id, no memo, an
-- expired one, or nothing of it still held -- means the caller claims afresh: a retried
-- poll is still a poll, never answered empty while there is work.
-- The memo of what `poll_id` was handed (nil: no poll id, no memo, or an expired one).
local function poll_recall(polls_key, times_key, poll_id, now)
  if poll_id == '' then return nil end
  local field = poll_field(poll_id)
  local raw = redis.call('HGET', polls_key, field)
  local at = tonumber(redis.call('ZSCORE', times_key, field))
  if not raw or not at or at < now - POLL_MEMORY_MS then return nil end
  -- A memo of an earlier poll of the same poller (the usual case: each poll of a poller
  -- asks) does not hold the text of this poll id: answered without decoding its ids.
  if not string.find(raw, poll_id, 1, true) then return nil end
  local memo = poll_memo_decode(raw)
  if not memo or memo.p ~= poll_id then return nil end  -- an earlier poll of the poller
  return memo
end

local function poll_replay(polls_key, times_key, poll_id, now, replay_one)
  local memo = poll_recall(polls_key, times_key, poll_id, now)
  if not memo then return 0 end
  local n = 0
  for i = 1, #memo.ids do
    if replay_one(memo.ids[i], memo.tokens[i]) then n = n + 1 end
  end
  return n
end

-- Remember what `poll_id` was handed (nothing for an empty memo or no poll id; an empty
-- poll of a poller drops the memo of its poll before), then forget a batch of memos
-- older than POLL_MEMORY_MS.
local function poll_remember(polls_key, times_key, poll_id, memo, now)
  local field = poll_field(poll_id)
  if poll_id ~= '' and (#memo.ids > 0 or memo.b) then
    memo.p = poll_id
    redis.call('HSET', polls_key, field, cmsgpack.pack(memo))
    redis.call('ZADD', times_key, now, field)
  elseif field ~= poll_id then
    if redis.call('HDEL', polls_key, field) > 0 then redis.call('ZREM', times_key, field) end
  end
  local old = redis.call('ZRANGE', times_key, '-inf', now - POLL_MEMORY_MS, 'BYSCORE',
    'LIMIT', 0, POLL_FORGET_BATCH)
  if #old > 0 then
    redis.call('HDEL', polls_key, unpack(old))
    redis.call('ZREM', times_key, unpack(old))
  end
end
