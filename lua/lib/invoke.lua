--[[ lib/invoke
  Creating one run of an action: ready now (handed to a parked poller, or pushed and
  announced) or delayed until `due`. The caller has validated everything; this only writes.
]]
--@include lib/run.lua
--@include lib/queue.lua
--@include lib/handoff.lua
--@include lib/ids.lua
--@include lib/flow.lua
--@include lib/graph.lua

-- k: {meta, runs, inputs, pending, delayed, idempotency, wake}, and for the hand-off
-- (lib/handoff.lua) {parked, polls, poll_times, owners, owned, leases, rate} -- without
-- `parked` a ready run is always queued; priority 0..255 (checked by the caller); trace:
-- the producer's packed trace context, or '' (stored only when given); flow_key: nil or
-- the run's flow key, `flow` its settings (lib/flow.lua, flow_settings): a run of a key
-- at its limit is held back at once, and one past its key's rate put off, so neither is
-- in the way of other keys' hand-offs.
-- deps: nil, or the run's parents (lib/graph.lua, graph_wait): it waits for them;
-- batch: nil, or the batch it is a member of (lib/batch.lua), told by a message.
-- Returns the new run id, and whether it was handed to a parked poller.
local function invoke_run(k, action, id_prefix, input, labels, now, due, idem_key, priority,
    trace, flow_key, flow, deps, batch)
  local seq = ids_take(k.meta, 'seq', 1, now)
  local run_id = string.format('%s%d', id_prefix, seq)
  local run = {s = RUN_PENDING, a = 0, t = 0, c = now, mr = action.max_retries}
  if priority > 0 then run.p = priority end
  if due > now then run.rd = due end
  if labels ~= '' then run.lb = cmsgpack.unpack(labels) end
  if trace ~= '' then run.tr = trace end
  if flow_key then
    run.fk = flow_key
    run.fw = flow.step
  end
  if batch then
    run.bt = batch
    local group = string.format('b\0%s\0%d\0%d\0', id_prefix, seq, 1)
    redis.call('ZADD', k.outbox, now, group .. batch)
  end
  if idem_key ~= '' then
    run.ik = idem_key
    redis.call('HSET', k.idempotency, idem_key, run_id)
  end
  redis.call('HSET', k.inputs, run_id, input)
  local wait = due <= now and flow_key and flow_wait_until(flow_counts(k, 0), flow, flow_key, now)
  if deps then
    graph_wait(k, id_prefix, seq, 1, run, deps, now)
  elseif due > now then
    record_save(k.runs, run_id, run)
    redis.call('ZADD', k.delayed, due, run_id)
    handoff_delayed(k, run_id)
  elseif flow_key and flow.limit > 0 and flow_full(flow_counts(k, flow.limit), flow_key) then
    flow_hold(k, run_id, run, queue_place(k, run))
  elseif wait then
    -- Its key's window is full, or paused: put off until then (lib/flow.lua).
    flow_defer(k, run_id, run, wait)
    handoff_delayed(k, run_id)
  elseif k.parked and handoff_new(k, action, run_id, run, input, now) then
    return run_id, true
  else
    record_save(k.runs, run_id, run)
    queue_push(k, run_id, run)
    redis.call('SPUBLISH', k.wake, '1')
  end
  return run_id, false
end
