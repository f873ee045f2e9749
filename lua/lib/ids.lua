--[[ lib/ids
  Ids and fencing tokens that never repeat, even after Redis lost data (a restart without
  persistence, a flush, a failover to a replica that lags): lua/README.md, "Ids and
  tokens". A counter is a hash field holding the last value it handed out. It counts on
  from there, but never trails the server clock (ms times IDS_PER_MS) by more than
  IDS_TRAIL: then it is moved up to the clock. So a counter made again after a loss, or
  a lagging replica's older one, starts past every value handed out before, as long as
  the clock has moved on since by more than that trail.
]]

-- Values per millisecond of server time: a counter runs ahead of the clock only past a
-- million values a second, and values stay exact in a double (below 2^53) until 2255.
local IDS_PER_MS = 1000
-- How far a counter may trail the clock (10 ms of values) before it is moved up to it.
-- Counting on costs an HINCRBY, as a plain counter does; moving up costs one more
-- write, at most once per 10 ms whatever the rate.
local IDS_TRAIL = 10000

-- Take `n` new values of counter `field` in hash `key` at server time `now` (ms): the
-- values first .. first + n - 1, each above every value the counter handed out before.
-- A counter that was not there (new, or lost) starts past this millisecond's values:
-- those handed out in it before a flush are recorded nowhere that is left.
-- Returns first, and the counter's value before (0 when it was not there).
local function ids_take(key, field, n, now)
  -- n as text: Redis 7.0 turns a number argument into text with printf.
  local before = redis.call('HINCRBY', key, field, n == 1 and '1' or string.format('%d', n)) - n
  local floor = now * IDS_PER_MS
  if before == 0 then
    floor = floor + IDS_PER_MS
  elseif before >= floor - IDS_TRAIL then
    return before + 1, before
  end
  redis.call('HSET', key, field, string.format('%d', floor + n - 1))
  return floor, before
end
