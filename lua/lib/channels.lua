--[[ lib/channels
  An owner's channels in a queue's slot are named "<kind prefix><queue's hash tag>:<owner>"
  (flo_redis/_wire/keys.py: owner_channel, notice_channel, handoff_channel). A script that is
  handed such a channel (in KEYS, so that on a cluster it runs where the channel lives)
  holds it to the name built so from its own queue's tag and the owner it was named for:
  a caller pairing an owner with another channel -- another owner's, another queue's,
  or a made-up one nobody subscribes -- is refused, never believed. The name is built
  to be compared, never to reach a key.
]]

local LIVE_CHANNEL = 'flo:live:'
local NOTICE_CHANNEL = 'flo:note:'
local HANDOFF_CHANNEL = 'flo:hand:'

-- Is `channel` exactly the channel of kind `prefix` that `owner` has in the slot of
-- `key` (any key of the queue: its hash tag is the first "{...}" in it)?
local function channel_of(channel, prefix, key, owner)
  local tag = string.match(key, '{[^}]*}')
  return tag ~= nil and owner ~= '' and channel == prefix .. tag .. ':' .. owner
end
