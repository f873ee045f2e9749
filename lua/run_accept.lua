--[[ run_accept
  Accept runs offered to the caller's poller by a hand-off (lib/offer.lua), each for its
  current holder only and answered on its own: an offer standing under the item's token
  is accepted (its lease ends when the hand-off promised); one accepted before, or a run
  the same hand-out already reported, answers OK with duplicate = 1 and changes nothing;
  a run that went back to its queue (the offer was not accepted in time) or on to another
  holder answers STALE, and the caller stops its handler.
  KEYS[1] runs     HASH  run_id -> msgpack record
  KEYS[2] leases   ZSET  run_id -> lease deadline ms
  ARGV[1] items    msgpack array, flat: run_id, token (1 .. 2^53) of each item in turn
                   (at most MAX_ITEMS items)
  Returns {status, (item_status, duplicate, run_status) * n}
          status: OK | BAD_ARG (items not such an array) | OUT_OF_RANGE (more than
          MAX_ITEMS items); item_status: OK | NOT_FOUND | STALE
]]
--@include lib/status.lua
--@include lib/run.lua
--@include lib/offer.lua
--@include lib/checked.lua
local runs_key = KEYS[1]
local leases_key = KEYS[2]
local items = arg_array(ARGV[1], INT_MAX)
local MAX_ITEMS = 1000

if not items or #items % 2 ~= 0 then return {ST_BAD_ARG, 1} end
if #items > 2 * MAX_ITEMS then return {ST_OUT_OF_RANGE, MAX_ITEMS} end
for i = 1, #items, 2 do
  local token = arg_int(items[i + 1], 1, INT_MAX)
  if type(items[i]) ~= 'string' or not token then return {ST_BAD_ARG, 1} end
  items[i + 1] = token  -- parsed once, as run_is_holder takes it
end
local n_items = #items / 2
if n_items == 0 then return {ST_OK} end
local ids = {}
for i = 1, n_items do ids[i] = items[2 * i - 1] end
local raws = redis.call('HMGET', runs_key, unpack(ids))
local decoded = run_decode_all(raws)
local loaded = {}  -- run_id -> record (false: none), as changed by this call
local records, n_saved = {}, 0
local out, out_n = {ST_OK}, 1
for i = 1, n_items do
  local run_id, token = ids[i], items[2 * i]
  local run = loaded[run_id]
  if run == nil then
    -- A record that does not decode is answered as none: the claims and the reaper,
    -- which report what they set aside, quarantine it.
    run = decoded[i]
    loaded[run_id] = run
  end
  local status, duplicate, state = ST_NOT_FOUND, 0, -1
  if run then
    state = run.s
    if run_is_holder(run, token, '') then
      status = ST_OK
      if offer_accept(leases_key, run_id, run) then
        n_saved = n_saved + 1
        records[2 * n_saved - 1] = run_id
        records[2 * n_saved] = cmsgpack.pack(run)
      else
        duplicate = 1
      end
    elseif run_reported_by(run, token, '') then
      status, duplicate = ST_OK, 1
    else
      status = ST_STALE
    end
  end
  out[out_n + 1] = status
  out[out_n + 2] = duplicate
  out[out_n + 3] = state
  out_n = out_n + 3
end
if n_saved > 0 then redis.call('HSET', runs_key, unpack(records)) end
return out
