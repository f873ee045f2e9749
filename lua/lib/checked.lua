--[[ lib/checked
  What a script takes from outside, checked before it is used: its ARGV, and settings
  stored in a hash. Lua's tonumber reads 'nan', 'inf', '1e300' and fractions, and
  cmsgpack.unpack raises on bytes that do not decode, so a value used as it comes turns
  into a Lua runtime error (a comparison with nil), a NaN score, or a refusal by Redis,
  deep in the script and maybe after a write. A script reads each numeric, flag, stream
  id and msgpack argument through these at its top and, when one is refused, answers
  {ST_BAD_ARG, i} (i: the ARGV index) before anything is read or written; the gateway
  raises that as BadRequestError naming the argument (flo_redis/_wire/gateway.py).
]]
-- 2^53 (every integer up to it is exact in a double), and 2^32 - 1.
local INT_MAX = 9007199254740992
local U32_MAX = 4294967295
-- 2^64 - 1 as Redis writes it: the largest part of a stream id.
local U64_MAX_TEXT = '18446744073709551615'

-- `s` as an integer in [low, high]; nil when it is none (not a number, NaN, infinite, a
-- fraction, out of the range). Read by tonumber: decimal text, as Python sends ints.
local function arg_int(s, low, high)
  local n = tonumber(s)
  if n and n >= low and n <= high and n % 1 == 0 then return n end
  return nil
end

-- '' as false (the argument is left out), else as arg_int reads it: the integer, or nil.
-- (arg_int's test written out, not called: a complete batch reads a token per item.)
local function arg_int_or_none(s, low, high)
  if s == '' then return false end
  local n = tonumber(s)
  if n and n >= low and n <= high and n % 1 == 0 then return n end
  return nil
end

-- '1' as true and '0' as false; nil for anything else.
local function arg_flag(s)
  if s == '1' then return true end
  if s == '0' then return false end
  return nil
end

-- The table msgpack bytes `s` hold, or nil when they do not decode to one.
local function arg_table(s)
  local ok, value = pcall(cmsgpack.unpack, s)
  if ok and type(value) == 'table' then return value end
  return nil
end

-- The map msgpack bytes `s` hold (keyed by names: no array items), or nil.
local function arg_map(s)
  local t = arg_table(s)
  if t and #t == 0 then return t end
  return nil
end

-- How many items the msgpack array that bytes `s` open with holds (its header: fixarray,
-- array 16 or array 32), or nil when they open with something else (or `s` is no string).
local function msgpack_array_len(s)
  if type(s) ~= 'string' then return nil end
  local b = string.byte(s, 1)
  if not b then return nil end
  if b >= 144 and b <= 159 then return b - 144 end  -- 0x90 .. 0x9f
  if b == 220 then  -- 0xdc: two bytes of length, big-endian
    local h, l = string.byte(s, 2, 3)
    return l and h * 256 + l
  end
  if b == 221 then  -- 0xdd: four
    local b1, b2, b3, b4 = string.byte(s, 2, 5)
    return b4 and ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  end
  return nil
end

-- The msgpack array of at most `limit` items bytes `s` hold, as it decodes: its table
-- and its length, read from its header before it is decoded; nil when `s` holds no such
-- array. An array decodes to keys 1 .. length alone, so no key needs counting (pairs()
-- would cost a call per item), but an item may be nil (a msgpack nil): arg_array refuses
-- that; a caller that checks each item up to the length itself may take this.
local function arg_array_of(s, limit)
  local n = msgpack_array_len(s)
  if not n or n > limit then return nil end
  local t = arg_table(s)
  if not t then return nil end
  return t, n
end

-- The array of at most `limit` items msgpack bytes `s` hold (no other keys, no nil
-- item), or nil.
local function arg_array(s, limit)
  local t, n = arg_array_of(s, limit)
  if not t then return nil end
  for i = 1, n do
    if t[i] == nil then return nil end
  end
  return t
end

-- Is `d` (decimal digits) at most 2^64 - 1?
local function u64_digits(d)
  return #d < 20 or (#d == 20 and d <= U64_MAX_TEXT)
end

-- `s` when it is a stream id Redis takes ('<ms>-<seq>' or '<ms>', each part a u64 in
-- decimal digits), else nil.
local function arg_stream_id(s)
  if type(s) ~= 'string' then return nil end
  if #s < 20 then  -- no part can pass 2^64 - 1: one look at the form (acks are batches)
    if string.find(s, '^%d+%-%d+$') or string.find(s, '^%d+$') then return s end
    return nil
  end
  local ms, seq = string.match(s, '^(%d+)%-(%d+)$')

  if not ms then ms, seq = string.match(s, '^%d+$'), '0' end
  if ms and u64_digits(ms) and u64_digits(seq) then return s end
  return nil
end

-- The array msgpack bytes `s` hold when each of its at most `limit` items is a stream
-- id (arg_stream_id); else nil.
local function arg_stream_ids(s, limit)
  local ids = arg_array(s, limit)
  if not ids then return nil end
  for i = 1, #ids do
    if not arg_stream_id(ids[i]) then return nil end
  end
  return ids
end

-- Is `t` an array of at most `limit` non-empty strings (owner ids, names)?
local function names_ok(t, limit)
  if type(t) ~= 'table' or #t > limit then return false end
  for i = 1, #t do
    if type(t[i]) ~= 'string' or t[i] == '' then return false end
  end
  return true
end

-- The array of names (names_ok) msgpack bytes `s` hold, or nil.
local function arg_names(s, limit)
  local names = arg_array(s, limit)

  if names and names_ok(names, limit) then return names end
  return nil
end

