--[[ action_held
  The runs each named worker holds in this action now, read from the owner index: for
  each holder (the owner id of its process and its worker id), up to `limit` of its runs,
  in run id order, each with its token, attempt, start, lease deadline and whether it is
  only offered (handed to the worker, not yet accepted: lib/offer.lua), and how many it
  holds in all. Read only, and bounded: at most 1000 index entries read in all, shared
  in order by the holders; a holder whose entries were not all read is answered with
  complete 0 (held then counts only those read). An index entry of a run the holder no
  longer holds (finished, taken back, cleaned up later by action_reclaim) does not count.
  KEYS[1] runs     HASH  run_id -> msgpack record
  KEYS[2] leases   ZSET  run_id -> lease deadline ms
  KEYS[3] owned    ZSET  "<owner>\0<run_id>" (score 0): the runs handed to each owner
  ARGV[1] holders  msgpack array of owner id, worker id, owner id, worker id ... (names;
                   at most 100 holders)
  ARGV[2] limit    runs listed per holder, 0 .. 100
  Returns {status, (held, complete, n, (run_id, token, attempt, started_ms, deadline_ms,
          offered) * n) * holders}   status: OK; deadline_ms -1: no lease (never expires
          is NEVER_MS); offered 1 when only offered
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/run.lua
--@include lib/owners.lua
local k = {runs = KEYS[1], leases = KEYS[2], owned = KEYS[3]}
local holders = arg_names(ARGV[1], 200)
local limit = arg_int(ARGV[2], 0, 100)
local SCAN_MAX = 1000

if not holders or #holders % 2 ~= 0 then return {ST_BAD_ARG, 1} end
if not limit then return {ST_BAD_ARG, 2} end

local out = {ST_OK}
local budget = SCAN_MAX
for i = 1, #holders, 2 do
  local owner, worker_id = holders[i], holders[i + 1]
  local entries = {}
  if budget > 0 then entries = owned_range(k.owned, owner, budget + 1) end
  local complete = 1
  if #entries > budget then
    complete = 0
    entries[#entries] = nil
  end
  budget = budget - #entries
  local held, shown, listed = 0, 0, {}
  for _, entry in ipairs(entries) do
    local _, run_id = owned_split(entry)
    local run = run_id and run_load(k.runs, run_id)
    if run and run.s == RUN_RUNNING and run.o == owner and run.w == worker_id then
      held = held + 1
      if held <= limit then
        local deadline = tonumber(redis.call('ZSCORE', k.leases, run_id)) or -1
        local offered = 0
        if run.of ~= nil then offered = 1 end
        shown = shown + 1
        listed[#listed + 1] = run_id
        listed[#listed + 1] = run.t or 0
        listed[#listed + 1] = run.a
        listed[#listed + 1] = run.st or 0
        listed[#listed + 1] = deadline
        listed[#listed + 1] = offered
      end
    end
  end
  out[#out + 1] = held
  out[#out + 1] = complete
  out[#out + 1] = shown
  for _, v in ipairs(listed) do out[#out + 1] = v end
end
return out
