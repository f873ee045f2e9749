--[[ lib/history
  What an action's runs did in each minute of the last 72 hours, in one STRING per action
  (its `history` key): a ring of 4,320 one-minute slots after an 8-byte head.
    head  bytes 0-3: the first minute the ring was written (minute = ms / 60000, u32);
          bytes 4-7: the newest minute written (u32)
    slot  minute m lives at byte 8 + ((m - first) mod 4320) * 151: the minute it holds
          (u32), then 49 counters (u24, big-endian, saturating): completed, failed
          (FAILED or TIMED_OUT), retried (a failure with attempts left: failed by its
          handler, or its lease expired, or its worker process died), then 23 buckets
          of pickup latency and 23 of handler duration (HISTORY_EDGES)
  A slot holding another minute than the one asked for is empty: a slot is zeroed when
  its minute is first written, so the ring never grows past 8 + 4320 * 151 bytes
  (652,328; 640 KiB of Redis memory) whatever the traffic, and the key expires 72 hours
  and a minute after its newest minute (an idle action's history goes by itself). The
  ring starts at the action's first minute, so the string grows with the time it has
  been used, not with the clock.
  A script notes what it counts in a table of its own, `noted` (counter index -> n;
  history_note, history_attempt), and writes it with one BITFIELD per call
  (history_save): a batch of a thousand completes is one write.
]]
-- The ring's geometry (KEEP_MS: (4320 + 1) minutes), then the counter indexes in a slot;
-- one table, not a local each, to keep the Functions library's locals in bounds.
local HISTORY = {MINUTES = 4320, HEAD = 8, SLOT = 151, KEEP_MS = 259260000,
  COMPLETED = 0, FAILED = 1, RETRIED = 2, PICKUP = 3, DURATION = 26}
-- Bucket i (1 .. 21) holds [HISTORY_EDGES[i], HISTORY_EDGES[i + 1]) ms; bucket 0 under
-- 1 ms, bucket 22 from 10^7 ms (2.8 h) on. (Mirrored in flo_redis/actions/history.py.)
local HISTORY_EDGES = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
  50000, 100000, 200000, 500000, 1000000, 2000000, 5000000, 10000000}

-- The bucket (0 .. 22) of `ms`: the edges from the lowest up, comparisons only (most
-- latencies sit in the low buckets, and a loop of comparisons costs less than a binary
-- search's calls to math.floor).
local function history_bucket(ms)
  local edges = HISTORY_EDGES
  for i = 1, 22 do
    if ms < edges[i] then return i - 1 end
  end
  return 22
end

-- Add `n` to counter `index` in `noted`.
local function history_note(noted, index, n)
  noted[index] = (noted[index] or 0) + n
end

-- Note one attempt of `run` its handler reported at `now`: how long it waited to be
-- picked up (started minus ready, or created) and how long it ran (now minus started).
local function history_attempt(noted, run, now)
  local started = run.st
  if not started then return end
  local waited = started - (run.rd or run.c)
  if waited < 0 then waited = 0 end
  local ran = now - started
  if ran < 0 then ran = 0 end
  local p = HISTORY.PICKUP + history_bucket(waited)
  local d = HISTORY.DURATION + history_bucket(ran)
  noted[p] = (noted[p] or 0) + 1
  noted[d] = (noted[d] or 0) + 1
end

-- The bit offset of minute `minute`'s slot in a ring that starts at `first`.
local function history_slot_bit(first, minute)
  return (HISTORY.HEAD + ((minute - first) % HISTORY.MINUTES) * HISTORY.SLOT) * 8
end

-- Write `noted` into the slot of `now`'s minute in the ring `key`: one BITFIELD (the
-- head read first), and once a minute the slot zeroed and the expiry moved on.
local function history_save(key, now, noted)
  if next(noted) == nil then return end
  local minute = math.floor(now / 60000)
  local head = redis.call('BITFIELD', key, 'GET', 'u32', 0, 'GET', 'u32', 32)
  local first, last = head[1], head[2]
  local cmd, j = {}, 2
  cmd[1], cmd[2] = 'OVERFLOW', 'SAT'  -- counters stop at 2^24 - 1, never wrap
  local function set(bit, value)
    cmd[j + 1], cmd[j + 2], cmd[j + 3], cmd[j + 4] = 'SET', 'u32', bit, value
    j = j + 4
  end
  if first == 0 then  -- a new ring (or one that expired): it starts now
    first = minute
    set('0', minute)
  end
  local at = history_slot_bit(first, minute)
  if minute ~= last then
    -- The minute's first write (or the clock went back): a slot left from an earlier
    -- lap of the ring is zeroed first.
    local stale = minute > last
    if not stale then
      stale = redis.call('BITFIELD', key, 'GET', 'u32', at)[1] ~= minute
    end
    if stale then
      redis.call('SETRANGE', key, at / 8, string.rep('\0', HISTORY.SLOT))
      set(at, minute)
    end
    if minute > last then set('32', minute) end
  end
  local fmt = string.format
  for index, n in pairs(noted) do
    cmd[j + 1], cmd[j + 2] = 'INCRBY', 'u24'
    cmd[j + 3], cmd[j + 4] = fmt('%d', at + 32 + 24 * index), fmt('%d', n)
    j = j + 4
  end
  redis.call('BITFIELD', key, unpack(cmd))
  if minute ~= last then redis.call('PEXPIRE', key, HISTORY.KEEP_MS) end
end

-- Completed and failed runs in each of the `n` minutes up to `now`'s, oldest first, from
-- the ring `key` (read only: one BITFIELD_RO).
local function history_recent(key, now, n)
  local completed, failed = {}, {}
  local first = redis.call('BITFIELD_RO', key, 'GET', 'u32', 0)[1]
  local minute = math.floor(now / 60000)
  if first == 0 then
    for i = 1, n do completed[i], failed[i] = 0, 0 end
    return completed, failed
  end
  local cmd, j = {}, 0
  for m = minute - n + 1, minute do
    local at = history_slot_bit(first, m)
    cmd[j + 1], cmd[j + 2], cmd[j + 3] = 'GET', 'u32', at
    cmd[j + 4], cmd[j + 5], cmd[j + 6] = 'GET', 'u24', at + 32 + 24 * HISTORY.COMPLETED
    cmd[j + 7], cmd[j + 8], cmd[j + 9] = 'GET', 'u24', at + 32 + 24 * HISTORY.FAILED
    j = j + 9
  end
  local v = redis.call('BITFIELD_RO', key, unpack(cmd))
  for i = 1, n do
    local fresh = v[3 * i - 2] == minute - n + i
    completed[i] = fresh and v[3 * i - 1] or 0
    failed[i] = fresh and v[3 * i] or 0
  end
  return completed, failed
end
