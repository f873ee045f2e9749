--[[ lib/run
  Run records: msgpack maps in the queue's `runs` hash, keyed by run id.
  Fields: s status, a attempt, t token, w worker id, o owner, c created ms, st started ms,
  ct completed ms, mr max attempts, out output, oc outcome, err error, tb traceback, lb labels,
  ik idempotency key, p priority (absent: 0; lib/priority.lua), lrk/lrt/lrw/lrr the last
  accepted report (kind, token, worker, retry),
  rd ready ms: when the run last became (or, delayed, becomes) ready to claim; absent
  means its created time (a claim reports claimed minus ready as the pickup latency);
  pg / pt the last progress value its handler reported and when (run_progress),
  tr the producer's trace context (a msgpack map of W3C trace headers, opaque here; absent
  when the invoke carried none), handed to the worker with each claim.
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

local run_load, run_save = record_load, record_save

-- Is the caller the current holder? With a token the token decides; without one (flo's
-- token-less signature) the worker id of the current holder does.
local function run_is_holder(run, token, worker_id)
  if run.s ~= RUN_RUNNING then return false end
  if token ~= '' then return run.t == tonumber(token) end
  return run.w == worker_id
end

-- The run `run_id` when the caller holds it (run_is_holder); else nil and the reply to
-- refuse with: {NOT_FOUND}, or {STALE, run status}, counted in stat:stale_refused.
local function run_held(runs_key, meta_key, run_id, token, worker_id)
  local run = run_load(runs_key, run_id)
  if not run then return nil, {ST_NOT_FOUND} end
  if not run_is_holder(run, token, worker_id) then
    redis.call('HINCRBY', meta_key, 'stat:stale_refused', 1)
    return nil, {ST_STALE, run.s}
  end
  return run
end

-- Was the last accepted report made by this caller (same token, or same worker when
-- token-less)? Used to answer an identical resend as success.
local function run_reported_by(run, token, worker_id)
  if run.lrk == nil then return false end
  if token ~= '' then return run.lrt == tonumber(token) end
  return run.lrw == worker_id
end

-- Backoff before attempt `attempt + 1`: base * 2^(attempt-1), capped; 0 when base is 0.
local function run_backoff_ms(base, cap, attempt)
  if base <= 0 then return 0 end
  local delay = base * (2 ^ math.max(attempt - 1, 0))
  if delay > cap then delay = cap end
  return math.floor(delay)
end
