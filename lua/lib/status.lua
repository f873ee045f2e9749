--[[ lib/status
  Status codes every script returns first; mirrored by flo_redis._wire.status.Status.
]]
local ST_OK = 0
local ST_NOT_FOUND = 1      -- the run / entry / worker is unknown
local ST_NO_ACTION = 2      -- the action is not registered
local ST_STALE = 3          -- the caller's lease / delivery is no longer current
local ST_TOO_LARGE = 4      -- a payload exceeds the configured maximum
local ST_OUT_OF_RANGE = 5   -- an argument is outside its allowed range
local ST_UNHEALTHY = 6      -- the worker missed its heartbeats
local ST_DRAINING = 7       -- the worker is draining
local ST_CONFLICT = 8       -- the item is not in a state that allows the operation
local ST_NO_GROUP = 9       -- the stream group does not exist
local ST_WRONG_OWNER = 10   -- the lease / slot is held by another owner
local ST_OWNER_ALIVE = 11   -- the lease owner is alive; nothing to reclaim
local ST_BAD_ARG = 12       -- ARGV[i] is not what the header takes: {ST_BAD_ARG, i}
local ST_BAD_SETTING = 13   -- a setting stored for the action does not parse
local ST_BAD_RECORD = 14    -- the stored record does not decode; it was set aside (quarantine)
