--[[ worker_presence
  Whether each listed owner's process holds its liveness subscription in the registry's
  slot now: the subscriber count of each channel (PUBSUB SHARDNUMSUB). A worker record
  names the owner that registered it (lib/workers.lua, `ow`); 0 means that process is
  gone, or its connection dropped a moment ago. Reads nothing else, writes nothing, and
  never publishes on a liveness channel.
  KEYS[1] workers  HASH  worker_id -> msgpack record (its slot is the channels' slot,
                   so on a cluster the call runs on the node that counts them)
  KEYS[2..n] channels  CHANNEL  liveness channels in the registry's slot, at most 1024
  Returns {status, count * n}   status: OK | OUT_OF_RANGE (more than 1024 channels);
          one subscriber count per channel, in KEYS order
]]
--@include lib/status.lua
local workers_key = KEYS[1]
local channels = {}
for i = 2, #KEYS do channels[#channels + 1] = KEYS[i] end
local MAX_CHANNELS = 1024  -- a page of worker_list names at most this many owners

if #channels > MAX_CHANNELS then return {ST_OUT_OF_RANGE} end
local out = {ST_OK}
if #channels == 0 then return out end
-- One command for them all: {channel, count, channel, count, ...}.
local reply = redis.call('PUBSUB', 'SHARDNUMSUB', unpack(channels))
for i = 2, #reply, 2 do out[#out + 1] = tonumber(reply[i]) end
return out
