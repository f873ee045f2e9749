--[[ stream_trim
  Remove (or with dry_run only count) a stream partition's oldest records, at most `batch`
  per call; the caller repeats while `more` is 1. Modes: 'before' removes ids <= bound,
  'below' ids < bound, 'max_age' ids older than bound seconds (the call answers the cutoff
  id, to pass on as 'below' so every call uses the same cutoff), 'max_len' keeps the newest
  bound records (its dry run counts in one call).
  KEYS[1] log   STREAM  the records
  KEYS[2] meta  HASH    bytes: payload and header bytes held
  ARGV[1] mode     'before' | 'below' | 'max_age' | 'max_len'
  ARGV[2] bound    an id, seconds (0 .. 2^53 / 1000) or a length (0 .. 2^53), by mode
  ARGV[3] dry_run  '1' to count without removing, '0' to remove
  ARGV[4] after    dry runs: '' or the last id counted by the previous call
  ARGV[5] batch    at most this many records per call (1 .. 1000)
  Returns {status, n, more, last_id, cutoff, length, entries_added}
          status: OK | NOT_FOUND (no such stream); cutoff: the 'below' id of a max_age trim
]]
--@include lib/status.lua
--@include lib/clock.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], meta = KEYS[2]}
local mode = ARGV[1]
local bound = ARGV[2]
local dry_run = arg_flag(ARGV[3])
local after = ARGV[4]
local batch = arg_int(ARGV[5], 1, BATCH_MAX)

local bound_ok
if mode == 'before' or mode == 'below' then bound_ok = arg_stream_id(bound)
elseif mode == 'max_age' then bound_ok = arg_int(bound, 0, 9007199254740)
elseif mode == 'max_len' then bound_ok = arg_int(bound, 0, INT_MAX)
else return {ST_BAD_ARG, 1} end
if not bound_ok then return {ST_BAD_ARG, 2} end
if dry_run == nil then return {ST_BAD_ARG, 3} end
if after ~= '' and not arg_stream_id(after) then return {ST_BAD_ARG, 4} end
if not batch then return {ST_BAD_ARG, 5} end

if redis.call('EXISTS', k.log) == 0 then return {ST_NOT_FOUND} end
local cutoff = ''
if mode == 'max_age' then
  local cutoff_ms = now_ms() - tonumber(bound) * 1000
  -- An age reaching before the epoch keeps everything ('0-0' trims nothing below it).
  if cutoff_ms <= 0 then cutoff = '0-0' else cutoff = string.format('%d-0', cutoff_ms) end
  mode = 'below'
  bound = cutoff
end

local n, more, last = 0, 0, ''
if mode == 'max_len' then
  local length = redis.call('XLEN', k.log)
  local excess = length - tonumber(bound)
  if excess > 0 then
    if dry_run then
      n = excess
    else
      n = math.min(excess, batch)
      local doomed = redis.call('XRANGE', k.log, '-', '+', 'COUNT', n)
      local bytes = 0
      for _, entry in ipairs(doomed) do bytes = bytes + stream_size(entry[2]) end
      redis.call('XTRIM', k.log, 'MAXLEN', '=', length - n)
      redis.call('HINCRBY', k.meta, 'bytes', -bytes)
      if excess > n then more = 1 end
    end
  end
else
  local high = bound
  if mode == 'below' then high = '(' .. bound end
  local low = '-'
  if after ~= '' then low = '(' .. after end
  local ok = not (mode == 'below' and bound == '0-0')
  local doomed = {}
  if ok then doomed = redis.call('XRANGE', k.log, low, high, 'COUNT', batch) end
  n = #doomed
  if n == batch then more = 1 end
  if n > 0 then
    last = doomed[n][1]
    if not dry_run then
      local bytes = 0
      for _, entry in ipairs(doomed) do bytes = bytes + stream_size(entry[2]) end
      local rest = redis.call('XRANGE', k.log, '(' .. last, '+', 'COUNT', 1)
      if #rest == 0 then
        redis.call('XTRIM', k.log, 'MAXLEN', '=', 0)
      else
        redis.call('XTRIM', k.log, 'MINID', '=', rest[1][1])
      end
      redis.call('HINCRBY', k.meta, 'bytes', -bytes)
    end
  end
end
return {ST_OK, n, more, last, cutoff, redis.call('XLEN', k.log), stream_added(k.log)}
