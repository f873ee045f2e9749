--[[ lib/offer
  Offers (lua/README.md, "Hand-off"). A run handed to a parked poller that states an offer
  window is the poller's from then on (RUNNING, its token, owner and memo), but only
  offered: its lease ends when the window does, and its record keeps
    of  the lease deadline the hand-off promised (hand-off time + timeout_ms, or NEVER_MS)
    q   its place in `pending` (the score it had there, or one taken when it was handed new)
  while the offer stands. The poller accepts it (run_accept, or its touch, progress,
  complete or fail, or its next claim): the lease then ends at `of`, and both fields go.
  An offer not accepted in time goes back to its place, its attempt not spent
  (queue_unoffer in lib/queue.lua), at most OFFER_FREE_RETURNS times in a row (the
  record counts them in `ox` until an accept): a run whose handler keeps its worker
  from accepting (an `async def` handler that blocks the event loop past the window)
  would otherwise go round the workers for ever without spending an attempt; past
  that, an offer that runs out is a lease that ran out. `of` and `q` mean something
  only while the run is RUNNING; every way out of RUNNING drops them.
]]
--@include lib/num.lua

-- Offers of one run that may run out in a row, each put back unspent.
local OFFER_FREE_RETURNS = 3

-- Accept `run` (RUNNING, held by the caller) if it is offered: its lease ends when the
-- hand-off promised. True when it was offered; the caller saves the record.
local function offer_accept(leases_key, run_id, run)
  local deadline = run.of
  if deadline == nil then return false end
  redis.call('ZADD', leases_key, num_arg(deadline), run_id)
  run.of = nil
  run.q = nil
  if run.ox ~= nil then run.ox = nil end
  return true
end

-- `run` leaves RUNNING (reported, given back, taken back): an offer it stood under goes,
-- and the count of offers that ran out.
local function offer_forget(run)
  if run.of ~= nil then
    run.of = nil
    run.q = nil
  end
  if run.ox ~= nil then run.ox = nil end
end

-- May `run`'s offer, run out, go back unspent (queue_unoffer)?
local function offer_free(run)
  return run.of ~= nil and (run.ox or 0) < OFFER_FREE_RETURNS
end
