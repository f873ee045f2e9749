--[[ lib/batch
  A batch (lua/README.md, "Batches"): a set of runs, and of batches nested in it, with
  callbacks that are themselves runs. It lives in a hash slot of its own: its `state`
  hash (n members, c completed, f ended otherwise, sealed, the callbacks made, its parent
  batch, its retention), its `members` hash (member -> "<state> <version>": 'w' not
  ended, else the status it ended with; a run by its id, a nested batch as "b:<id>") and
  its `outbox` of messages for the forwarders (flo_redis/actions/graph.py):
    c <kind>                       make the callback `kind` (complete, success, death)
    p <parent> <status> <version>  tell the parent batch how this one ended
  Each callback is made once: the message is left once, as its flag in `state` is set.
]]

-- Whether each member of batch `k` has ended (it is sealed and has members), and if so
-- leave the messages that follow once: on_complete, on_success when none failed, and the
-- parent batch told (again each time the outcome changes: a failed member retried to
-- completion makes a failed batch a completed one). Keys expire `retention` ms after the
-- batch completed. `now` in ms.
local function batch_settle(k, now)
  local st = redis.call('HMGET', k.state, 'n', 'c', 'f', 'sealed', 'parent', 'ended',
    'retention')
  local n, c, f = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[3]) or 0
  if st[4] ~= '1' or n == 0 or c + f < n then return end
  local outcome = f == 0 and '2' or '3'  -- COMPLETED, or FAILED
  if st[6] == outcome then return end
  local version = redis.call('HINCRBY', k.state, 'version', 1)
  redis.call('HSET', k.state, 'ended', outcome)
  if redis.call('HSETNX', k.state, 'cb:complete', '1') == 1 then
    redis.call('ZADD', k.outbox, now, 'c\0complete')
  end
  if f == 0 and redis.call('HSETNX', k.state, 'cb:success', '1') == 1 then
    redis.call('ZADD', k.outbox, now, 'c\0success')
  end
  if st[5] and st[5] ~= '' then
    redis.call('ZADD', k.outbox, now, 'p\0' .. st[5] .. '\0' .. outcome .. '\0' .. version)
  end
  local retention = tonumber(st[7]) or 0
  if retention > 0 then
    for _, key in ipairs({k.state, k.members, k.outbox}) do
      redis.call('PEXPIRE', key, retention)
    end
  end
end
