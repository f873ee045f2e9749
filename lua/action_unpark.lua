--[[ action_unpark
  End the parks of one worker's pollers in this queue (lib/handoff.lua) and tell each
  poller to look again: the worker was told to drain, and its next poll is refused.
  KEYS[1] parked   ZSET  poller -> park deadline ms: pollers waiting for a hand-off
  KEYS[2] polls    HASH  poll memos; a parked poller's park rides in its memo
  KEYS[3] poll_times  ZSET  poll memo -> time ms
  ARGV[1] worker_id
  Returns {status, n}   status: OK; n: the parks ended
]]
--@include lib/status.lua
--@include lib/handoff.lua
local k = {parked = KEYS[1], polls = KEYS[2], poll_times = KEYS[3]}
local worker_id = ARGV[1]

return {ST_OK, handoff_unpark_worker(k, worker_id)}
