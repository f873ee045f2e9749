--[[ lib/complete
  Completing running runs, for their current holders only; shared by run_complete and
  run_complete_many so a batch applies exactly the single-run rules to each item. A
  batch reads its records in one call and writes each of the sets it changes in one
  call, whatever its size.
]]
--@include lib/status.lua
--@include lib/run.lua
--@include lib/owners.lua
--@include lib/ended.lua
--@include lib/num.lua
--@include lib/offer.lua
--@include lib/checked.lua
--@include lib/tally.lua
--@include lib/inputs.lua
--@include lib/flow.lua
--@include lib/graph.lua

-- The verdict on one complete of `run` (nil: no record) by the holder of `token` (a
-- number, or false: token-less; run_is_holder): status, duplicate, run status (or the
-- payload limit for TOO_LARGE). A holder's complete changes `run` to its completed
-- record; an identical resend of a complete that already took effect answers OK with
-- duplicate = 1 and changes nothing.
local function complete_verdict(run, token, worker_id, result, outcome, max_payload)
  if not run then return ST_NOT_FOUND, 0, -1 end
  if not run_is_holder(run, token, worker_id) then
    if run.s == RUN_COMPLETED and run.lrk == 'c' and run_reported_by(run, token, worker_id)
        and run.out == result and run.oc == outcome then
      return ST_OK, 1, run.s
    end
    return ST_STALE, 0, run.s
  end
  if max_payload >= 0 and #result > max_payload then
    return ST_TOO_LARGE, 0, max_payload
  end
  run.s = RUN_COMPLETED
  run.out = result
  run.oc = outcome
  -- A complete is an accept too (asked here first: most runs were never offered).
  if run.of ~= nil or run.ox ~= nil then offer_forget(run) end
  -- (a field set to nil is added first when absent: a table slot, maybe a rehash)
  if run.err ~= nil then run.err = nil end
  if run.tb ~= nil then run.tb = nil end
  run.lrk = 'c'
  run.lrt = run.t
  run.lrw = worker_id
  return ST_OK, 0, run.s
end

-- Check the first `n` values of a batch's items as they come (a flat array: run_id,
-- token as text, result, outcome of each item in turn) and parse each token in place,
-- as complete_runs takes it (arg_int_or_none: a number, or false for ''). Raises for a
-- run id, result or outcome that is not a string, nil too (`x >= ''` holds for a string
-- and raises for any other value, at a fraction of the cost of a type() call): run
-- under pcall. False for a token that is not '' or an integer in 1 .. 2^53.
local function complete_parse(items, n)
  for i = 1, n, 4 do
    if not (items[i] >= '' and items[i + 2] >= '' and items[i + 3] >= '') then
      return false
    end
    local token = arg_int_or_none(items[i + 1], 1, INT_MAX)
    if token == nil then return false end
    items[i + 1] = token
  end
  return true
end

-- complete_parse of the `n` values of `items`, under one pcall for the whole batch:
-- false when an item is not of that shape (the caller refuses the call before it writes
-- anything).
local function complete_items(items, n)
  local ok, fine = pcall(complete_parse, items, n)
  return ok and fine
end

-- Complete each item of `items`, a flat array of run_id, token (parsed: complete_items),
-- result, outcome of each item in turn, under the rules of complete_verdict, in order: a
-- run named twice sees the first complete. A record that does not decode is set aside
-- (run_aside: `k` names quarantine) and its item answered BAD_RECORD. Each item's
-- answer, status, duplicate and detail, is added to the reply `out` after its first
-- `out_n` values, in order; returns how many took effect. Those are noted in `k.noted`
-- (completed, with each attempt's pickup latency and duration: lib/tally.lua) for the
-- caller's tally_save.
local function complete_runs(k, action, now, items, worker_id, out, out_n)
  local n_items = #items / 4
  if n_items == 0 then return 0 end
  local ids = {}
  for i = 1, n_items do ids[i] = items[4 * i - 3] end
  local raws = redis.call('HMGET', k.runs, unpack(ids))
  local decoded, whys = run_decode_all(raws)
  local loaded = {}  -- run_id -> record (false: none), as changed by this call
  local owned, records, done, ended = {}, {}, {}, {}
  local n_owned, n_ended, stale = 0, 0, 0
  local at_now, max_payload = num_arg(now), action.max_payload
  local owner, prefix  -- the last holder seen, and its owner index prefix (owned_entry)
  local flows = nil  -- flow key -> runs of it completed here (lib/flow.lua)
  local pack = cmsgpack.pack
  k.groups, k.group_ends = {}, {}  -- the groups of runs ended here (lib/graph.lua)
  for i = 1, n_items do
    local at = 4 * i - 3
    local run_id = items[at]
    local run = loaded[run_id]
    local status, duplicate, detail
    if run == nil then
      run = decoded[i]
      -- Not one the scripts can use: set aside, and refused (a run named again in the
      -- batch is then not found).
      local why = whys and whys[i]
      if why then
        run_aside(k, run_id, raws[i], why)
        status, duplicate, detail = ST_BAD_RECORD, 0, -1
      end
      loaded[run_id] = run
    end
    local holder = run and run.o
    if not status then
      status, duplicate, detail = complete_verdict(run, items[at + 1], worker_id,
        items[at + 2], items[at + 3], max_payload)
    end
    if status == ST_STALE then stale = stale + 1 end
    if status == ST_OK and duplicate == 0 then
      history_attempt(k.noted, run, now)
      run.ct = now
      run.o = nil
      if holder then
        if holder ~= owner then owner, prefix = holder, owned_entry(holder, '') end
        n_owned = n_owned + 1
        owned[n_owned] = prefix .. run_id
      end
      if run.fk then
        flows = flows or {}
        flows[run.fk] = (flows[run.fk] or 0) + 1
      end
      if run.gd or run.bt or run.dg then graph_ended(k, run_id, run, now) end
      n_ended = n_ended + 1
      ended[n_ended] = run_id
      records[2 * n_ended - 1] = run_id
      records[2 * n_ended] = pack(run)
      done[2 * n_ended - 1] = at_now
      done[2 * n_ended] = run_id
    end
    out[out_n + 1] = status
    out[out_n + 2] = duplicate
    out[out_n + 3] = detail
    out_n = out_n + 3
  end
  if stale > 0 then redis.call('HINCRBY', k.meta, 'stat:stale_refused', stale) end
  graph_ended(k, nil, nil, now)  -- the groups counted above, each saved and told once
  if n_ended == 0 then return 0 end
  history_note(k.noted, HISTORY.COMPLETED, n_ended)
  if n_owned > 0 and k.owned then redis.call('ZREM', k.owned, unpack(owned)) end
  redis.call('HSET', k.runs, unpack(records))
  redis.call('ZREM', k.leases, unpack(ended))
  inputs_completed(k, ended)
  redis.call('ZADD', k.done, unpack(done))
  runs_ended(k.ended, ended)
  if flows then
    for key, n in pairs(flows) do flow_release(k, key, n, action.flow_concurrency > 0) end
  end
  return n_ended
end
