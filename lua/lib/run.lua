--[[ lib/run
  Run records: msgpack maps in the queue's `runs` hash, keyed by run id.
  Fields: s status, a attempt, t token, w worker id, o owner, c created ms, st started ms,
  ct completed ms, mr max attempts, out output, oc outcome, err error, tb traceback, lb labels,
  ik idempotency key, p priority (absent: 0; lib/priority.lua), lrk/lrt/lrw/lrr the last
  accepted report (kind, token, worker, retry),
  rd ready ms: when the run last became (or, delayed, becomes) ready to claim; absent
  means its created time (a claim reports claimed minus ready as the pickup latency);
  pg / pt the last progress value its handler reported and when (run_progress),
  fk the run's flow key and fw its step in virtual time when placed fairly (lib/flow.lua),
  tr the producer's trace context (a msgpack map of W3C trace headers, opaque here; absent
  when the invoke carried none), handed to the worker with each claim.
  A record the scripts cannot compute with (it does not decode, or a field they add,
  compare, join or hand out has another type) reads as false: the script sets it aside
  (run_aside) and goes on with the others, or refuses the one run it was asked about
  with BAD_RECORD.
]]
--@include lib/status.lua
--@include lib/record.lua
local RUN_PENDING = 0
local RUN_RUNNING = 1
local RUN_COMPLETED = 2
local RUN_FAILED = 3
local RUN_CANCELLED = 4
local RUN_TIMED_OUT = 5

-- Leases of actions with timeout_ms = 0 never expire; this deadline stands for "never".
local NEVER_MS = 4503599627370496

-- Why a decoded record `run` is not a run record the scripts can compute with: a status
-- they know; attempt, max attempts and created ms numbers; token, priority, ready and
-- started ms numbers when there; owner, trace and idempotency key strings and labels a
-- map when there. The explanation, for a record run_decode refused (type() is a call
-- per field: too dear for every record a claim reads).
local function run_check(run)
  local type = type
  if type(run) ~= 'table' then return 'not a msgpack map' end
  local s = run.s
  if type(s) ~= 'number' or s < RUN_PENDING or s > RUN_TIMED_OUT or s % 1 ~= 0 then
    return 'not a run record: no status it knows'
  end
  if type(run.a) ~= 'number' or type(run.mr) ~= 'number' or type(run.c) ~= 'number' then
    return 'not a run record: attempt, max attempts or created time not a number'
  end
  local t, p, rd, st = run.t, run.p, run.rd, run.st
  if (t and type(t) ~= 'number') or (p and type(p) ~= 'number')
      or (rd and type(rd) ~= 'number') or (st and type(st) ~= 'number') then
    return 'not a run record: token, priority, ready or started time not a number'
  end
  local o, tr, ik, lb = run.o, run.tr, run.ik, run.lb
  if (o and type(o) ~= 'string') or (tr and type(tr) ~= 'string')
      or (ik and type(ik) ~= 'string') or (lb and type(lb) ~= 'table') then
    return 'not a run record: owner, trace, idempotency key or labels not of its type'
  end
  local fk, fw = run.fk, run.fw
  if (fk and type(fk) ~= 'string') or (fw and type(fw) ~= 'number') then
    return 'not a run record: flow key or flow step not of its type'
  end
  return 'not a run record: a number in it is not a number (NaN)'
end

-- Decode raws[from], raws[from + 1], ... (bytes, or false: no record) into runs[from],
-- ... (false where there is no record), up to the first that is not a run record the
-- scripts can compute with: its index (nil: none). The same rules as run_check, by
-- comparisons, which cost a fraction of its calls: `x <= 2^1024` (infinity, folded to a
-- constant) holds for a number but NaN, `x >= ''` for a string, and either raises for
-- any other value (a numeric string too); written out in the loop, not called per
-- record. Raises for bytes that are not one msgpack value, or another value than a
-- map: run under pcall.
local function run_unpack_from(raws, runs, from)
  local unpack_record = cmsgpack.unpack
  for i = from, #raws do
    local raw = raws[i]
    if raw then
      local run, more = unpack_record(raw)
      local s, a, mr, c = run.s, run.a, run.mr, run.c
      local t, p, rd, st = run.t, run.p, run.rd, run.st
      local o, tr, ik, lb = run.o, run.tr, run.ik, run.lb
      if not (more == nil
          and (s == RUN_PENDING or s == RUN_RUNNING or s == RUN_COMPLETED or s == RUN_FAILED
            or s == RUN_CANCELLED or s == RUN_TIMED_OUT)
          and a <= 2^1024 and mr <= 2^1024 and c <= 2^1024
          and (t == nil or t <= 2^1024) and (p == nil or p <= 2^1024)
          and (rd == nil or rd <= 2^1024) and (st == nil or st <= 2^1024)
          and (o == nil or o >= '') and (tr == nil or tr >= '') and (ik == nil or ik >= '')
          and (lb == nil or type(lb) == 'table')
          and (run.fk == nil or (run.fk >= '' and (run.fw == nil or run.fw <= 2^1024)))) then
        return i
      end
      runs[i] = run
    else
      runs[i] = false
    end
  end
  return nil
end

-- The records `raws` (an HMGET reply: bytes, or false for none) decoded: runs[i] its
-- table, or false for none or for one the scripts cannot compute with, and then whys[i]
-- says why (whys: nil while all could be used). One pcall for the batch, not one per
-- record; a record that raises or is refused is decoded again on its own, the slow way,
-- for its reason (record_decode, run_check), and the batch goes on after it.
local function run_decode_all(raws)
  local runs, whys, from = {}, nil, 1
  while true do
    local ok, stop = pcall(run_unpack_from, raws, runs, from)
    if ok and not stop then return runs, whys end
    -- A raise at record i leaves runs[1 .. i - 1] set (false counts) and nothing after:
    -- i - 1 is its length.
    if not ok then stop = #runs + 1 end
    local decoded, why = record_decode(raws[stop])
    runs[stop] = false
    whys = whys or {}
    whys[stop] = why or run_check(decoded)
    from = stop + 1
  end
end

-- The run record `raw` decoded: its table, or false and why the scripts cannot use it.
local function run_decode(raw)
  local runs, whys = run_decode_all({raw})
  return runs[1], whys and whys[1]
end

-- The record of `run_id`: nil when there is none; false, why and its bytes when it is
-- not one the scripts can use (run_decode).
local function run_load(runs_key, run_id)
  return record_load(runs_key, run_id, run_decode)
end

-- Set aside the record `raw` of `run_id` (not usable: `why`) into k.quarantine with its
-- input, and take the run out of the queue: its record, its input, and its id from each
-- of the sets k names (pending, delayed, leases, done, failed, waiting). Its owner index entry, if
-- any, is left to the reclaim's clean-up. Listed in k.aside when the script has one.
local function run_aside(k, run_id, raw, why)
  record_aside_item(k, 'run', run_id, raw, why, k.runs, k.inputs,
    {'pending', 'delayed', 'leases', 'done', 'failed', 'waiting'})
end

-- Is the caller the current holder? With a token (a number: the script parsed it where
-- it checked it, arg_int_or_none) the token decides; without one (false: flo's
-- token-less signature) the worker id of the current holder does.
local function run_is_holder(run, token, worker_id)
  if run.s ~= RUN_RUNNING then return false end
  if token then return run.t == token end
  return run.w == worker_id
end

-- The run `run_id` when the caller holds it (run_is_holder); else nil and the reply to
-- refuse with: {NOT_FOUND}, {BAD_RECORD} (the record was set aside: run_aside, so `k`
-- names runs, inputs, leases, quarantine) or {STALE, run status}, counted in
-- stat:stale_refused (k.meta).
local function run_held(k, run_id, token, worker_id)
  local run, why, raw = run_load(k.runs, run_id)
  if run == false then
    run_aside(k, run_id, raw, why)
    return nil, {ST_BAD_RECORD}
  end
  if not run then return nil, {ST_NOT_FOUND} end
  if not run_is_holder(run, token, worker_id) then
    redis.call('HINCRBY', k.meta, 'stat:stale_refused', 1)
    return nil, {ST_STALE, run.s}
  end
  return run
end

-- Was the last accepted report made by this caller (same token, or same worker when
-- token-less: `token` as run_is_holder takes it)? Used to answer an identical resend as
-- success.
local function run_reported_by(run, token, worker_id)
  if run.lrk == nil then return false end
  if token then return run.lrt == token end
  return run.lrw == worker_id
end

-- Backoff before attempt `attempt + 1`: base * 2^(attempt-1), capped; 0 when base is 0.
local function run_backoff_ms(base, cap, attempt)
  if base <= 0 then return 0 end
  local delay = base * (2 ^ math.max(attempt - 1, 0))
  if delay > cap then delay = cap end
  return math.floor(delay)
end
