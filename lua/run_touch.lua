--[[ run_touch
  Extend a running run's lease, for its current holder only: the deadline becomes
  now + extend_ms unless it is already later. A run offered to the holder (a hand-off
  not yet accepted: lib/offer.lua) is accepted first.
  KEYS[1] runs     HASH  run_id -> msgpack record
  KEYS[2] leases   ZSET  run_id -> lease deadline ms
  KEYS[3] meta     HASH  counters; stat:stale_refused counts refused reports
  KEYS[4] inputs   HASH  run_id -> input bytes
  KEYS[5] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] run_id
  ARGV[2] token      fencing token from the claim (1 .. 2^53), or '' (then the worker id
                     decides)
  ARGV[3] worker_id
  ARGV[4] extend_ms  1 .. 3600000
  Returns {status, deadline_ms_or_run_status}
          status: OK | NOT_FOUND | STALE | BAD_RECORD (its record does not decode: it was
          set aside)
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/offer.lua
local k = {runs = KEYS[1], leases = KEYS[2], meta = KEYS[3], inputs = KEYS[4],
  quarantine = KEYS[5]}
local run_id = ARGV[1]
local token = arg_int_or_none(ARGV[2], 1, INT_MAX)  -- false: token-less
local worker_id = ARGV[3]
local MAX_EXTEND_MS = 3600000
local extend_ms = arg_int(ARGV[4], 1, MAX_EXTEND_MS)

if token == nil then return {ST_BAD_ARG, 2} end
if not extend_ms then return {ST_BAD_ARG, 4} end

local run, refused = run_held(k, run_id, token, worker_id)
if not run then return refused end
if offer_accept(k.leases, run_id, run) then record_save(k.runs, run_id, run) end
local deadline = now_ms() + extend_ms
local current = tonumber(redis.call('ZSCORE', k.leases, run_id))
if current and current > deadline then deadline = current end
redis.call('ZADD', k.leases, deadline, run_id)
return {ST_OK, deadline}
