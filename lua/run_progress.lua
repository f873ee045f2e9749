--[[ run_progress
  Store a running run's progress value, for its current holder only, and tell waiters on
  `ended` (client.action.wait re-reads the run: a progress is not an end). A run offered
  to the holder (a hand-off not yet accepted: lib/offer.lua) is accepted.
  KEYS[1] runs     HASH  run_id -> msgpack record
  KEYS[2] meta     HASH  counters; stat:stale_refused counts refused reports
  KEYS[3] ended    CHANNEL  sharded channel told the ids of runs that end or progress
  KEYS[4] leases   ZSET  run_id -> lease deadline ms
  KEYS[5] inputs   HASH  run_id -> input bytes
  KEYS[6] quarantine STREAM  records set aside (lib/record.lua)
  ARGV[1] run_id
  ARGV[2] token      fencing token from the claim (1 .. 2^53), or '' (then the worker id
                     decides)
  ARGV[3] worker_id
  ARGV[4] value      the progress bytes, at most 1024
  Returns {status, run_status_or_limit}
          status: OK | NOT_FOUND | STALE | TOO_LARGE (then the limit) | BAD_RECORD (its
          record does not decode: it was set aside)
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/clock.lua
--@include lib/run.lua
--@include lib/ended.lua
--@include lib/offer.lua
local k = {runs = KEYS[1], meta = KEYS[2], ended = ended_channel(KEYS[3]), leases = KEYS[4],
  inputs = KEYS[5], quarantine = KEYS[6]}
local run_id = ARGV[1]
local token = arg_int_or_none(ARGV[2], 1, INT_MAX)  -- false: token-less
local worker_id = ARGV[3]
local value = ARGV[4]
local MAX_PROGRESS_BYTES = 1024

if token == nil then return {ST_BAD_ARG, 2} end
if #value > MAX_PROGRESS_BYTES then return {ST_TOO_LARGE, MAX_PROGRESS_BYTES} end
local run, refused = run_held(k, run_id, token, worker_id)
if not run then return refused end
offer_accept(k.leases, run_id, run)
run.pg = value
run.pt = now_ms()
record_save(k.runs, run_id, run)
run_ended(k.ended, run_id)
return {ST_OK, run.s}
