--[[ lib/owners
  Owner liveness. An owner (a worker process) is present while its liveness channel -- a
  sharded pub/sub channel in the queue's hash slot, passed to the script in KEYS -- has a
  subscriber. A count of 0 is not proof of death (a connection blip, a failover), so an
  owner seen absent is first suspected, and judged gone only once it stayed absent for a
  grace period. Nothing is ever published on a liveness channel.
]]
--@include lib/channels.lua

-- Index entries of the runs handed to an owner: "<owner>\0<run_id>", score 0, so that
-- one owner's entries form one lexicographic range.
local OWNED_SEP = '\0'
-- A reclaim names at most this many owners (their channels ride in KEYS) and takes back
-- at most this many index entries per call.
local RECLAIM_MAX_OWNERS = 100
local RECLAIM_MAX_BATCH = 1000

local function owned_entry(owner, run_id)
  return owner .. OWNED_SEP .. run_id
end

-- Up to `limit` index entries of `owner` (run ids, with their entries).
local function owned_range(owned_key, owner, limit)
  return redis.call('ZRANGE', owned_key, '[' .. owner .. OWNED_SEP, '(' .. owner .. '\1',
    'BYLEX', 'LIMIT', 0, limit)
end

-- Forget that `owner` holds `run_id` (the run finished, or went back to wait). A script
-- that does not pass the index (owned_key nil) leaves it to the reclaim's clean-up.
local function owned_drop(owned_key, owner, run_id)
  if owned_key and owner then redis.call('ZREM', owned_key, owned_entry(owner, run_id)) end
end

-- Split an index entry into owner and run id.
local function owned_split(entry)
  local at = string.find(entry, OWNED_SEP, 1, true)
  if not at then return nil, nil end
  return string.sub(entry, 1, at - 1), string.sub(entry, at + 1)
end

-- Take back what `owner` holds: each of its index entries in `owned_key` is removed and
-- passed to give_back_one(id), at most budget.left entries in all (budget is shared by
-- the owners of one call). True once nothing of the owner is left -- the take_back that
-- owners_judge expects; false when the budget ran out first.
local function owned_take_back(owned_key, owner, budget, give_back_one)
  if budget.left <= 0 then return false end
  for _, entry in ipairs(owned_range(owned_key, owner, budget.left)) do
    budget.left = budget.left - 1
    redis.call('ZREM', owned_key, entry)
    local _, id = owned_split(entry)
    give_back_one(id)
  end
  return #owned_range(owned_key, owner, 1) == 0
end

-- Is `channel` exactly `owner`'s liveness channel in the slot of `key`, a key of the
-- queue (flo_redis._wire.keys.owner_channel)? Anything else -- "x:<owner>", another queue's or
-- another owner's channel -- has no subscriber to speak for the owner: refused.
local function owner_channel_of(channel, owner, key)
  return type(owner) == 'string' and channel_of(channel, LIVE_CHANNEL, key, owner)
end

-- Is a reclaim's request malformed? grace_ms >= 0, batch in 1..RECLAIM_MAX_BATCH, owners
-- an array of at most RECLAIM_MAX_OWNERS ids, channels[i] the liveness channel of
-- owners[i] in the slot of `key` (a key of the queue). A reclaim answers OUT_OF_RANGE,
-- before any write, when this is true.
local function reclaim_refused(grace_ms, batch, owners, channels, key)
  if not grace_ms or grace_ms < 0 or not batch or batch < 1 or batch > RECLAIM_MAX_BATCH
      or type(owners) ~= 'table' or #owners ~= #channels or #owners > RECLAIM_MAX_OWNERS then
    return true
  end
  for i, owner in ipairs(owners) do
    if not owner_channel_of(channels[i], owner, key) then return true end
  end
  return false
end

-- Does the owner's liveness channel have a subscriber now?
local function owner_present(channel)
  local reply = redis.call('PUBSUB', 'SHARDNUMSUB', channel)
  return tonumber(reply[2]) > 0
end

-- The verdict on an owner seen `present` (or not) at `now`, suspected since `since`
-- (0: not suspected): 'alive', 'suspect' or 'gone', and the suspicion mark to keep.
local function owner_verdict(present, since, now, grace_ms)
  if present then return 'alive', 0 end
  if since == 0 then since = now end
  if now - since >= grace_ms then return 'gone', since end
  return 'suspect', since
end

-- Judge each owner of `owners` (its liveness channel is channels[i]) at `now`, keeping
-- the suspicion marks in `owners_key`, and give back what gone owners hold through
-- take_back(owner), which answers true once nothing of that owner is left (false: its
-- batch ran out). Owners not listed in `owners_key` are skipped. Returns a table:
-- suspected, cleared, gone (counts), wait (ms until the earliest suspect's grace ends,
-- -1: none) and more (1 when some gone owner still holds work).
local function owners_judge(owners_key, owners, channels, now, grace_ms, take_back)
  local r = {suspected = 0, cleared = 0, gone = 0, wait = -1, more = 0}
  for i, owner in ipairs(owners) do
    local since = tonumber(redis.call('HGET', owners_key, owner))
    if since then
      local verdict, mark = owner_verdict(owner_present(channels[i]), since, now, grace_ms)
      if mark ~= since then
        redis.call('HSET', owners_key, owner, mark)
        if mark == 0 then r.cleared = r.cleared + 1 else r.suspected = r.suspected + 1 end
      end
      if verdict == 'suspect' then
        local left = mark + grace_ms - now
        if r.wait < 0 or left < r.wait then r.wait = left end
      elseif verdict == 'gone' then
        if take_back(owner) then
          redis.call('HDEL', owners_key, owner)
          r.gone = r.gone + 1
        else
          r.more = 1
        end
      end
    end
  end
  return r
end
