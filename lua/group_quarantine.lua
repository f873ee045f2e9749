--[[ group_quarantine
  Set aside entries a consumer cannot read (their headers do not decode as a msgpack map
  of strings): each one still pending in the group as the delivery the caller names (its
  delivery count, the fencing token) is acked in the group, its bookkeeping dropped, and
  its id, headers, payload and why kept in the group's quarantine, so the group's other
  entries go on. The entry stays in the stream: each group reads it on its own. One no
  longer pending as that delivery (acked, or handed out again) is left as it is.
  KEYS[1] log         STREAM  the records (the group lives here)
  KEYS[2] config      HASH    the group's settings
  KEYS[3] due         ZSET    entry id -> ms when it is to be delivered again
  KEYS[4] deliveries  HASH    entry id -> msgpack {o owner, c consumer, nk nacked}
  KEYS[5] owned       ZSET    "<owner>\0<entry id>": the deliveries each owner holds
  KEYS[6] quarantine  STREAM  records set aside (lib/record.lua)
  ARGV[1] group
  ARGV[2] entries  msgpack array, flat: entry id, delivery count, why of each entry (at
                   most 1000 entries)
  Returns {status, n, entry_id * n}   status: OK | NO_GROUP | BAD_ARG;
          the entries set aside
]]
--@include lib/status.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], config = KEYS[2]}
local g = {due = KEYS[3], deliveries = KEYS[4], owned = KEYS[5], quarantine = KEYS[6]}
local group = ARGV[1]
local MAX_ENTRIES = 1000
local entries = arg_array(ARGV[2], 3 * MAX_ENTRIES)

if not group_named(k.config, group) then return {ST_BAD_ARG, 1} end
if not entries or #entries % 3 ~= 0 then return {ST_BAD_ARG, 2} end
for i = 1, #entries, 3 do
  local count = entries[i + 1]
  if not arg_stream_id(entries[i]) or type(count) ~= 'number' or count < 1
      or count % 1 ~= 0 or type(entries[i + 2]) ~= 'string' then
    return {ST_BAD_ARG, 2}
  end
end
if not group_exists(k.log, k.config) then return {ST_NO_GROUP, 0} end

local out = {ST_OK, 0}
for i = 1, #entries, 3 do
  local id, count, why = entries[i], entries[i + 1], entries[i + 2]
  local p = group_pending_entry(k.log, group, id)
  if p and p[4] == count then
    local fields = stream_entry(k.log, id)
    local payload, headers = '', ''
    if fields then payload, headers = stream_fields(fields) end
    record_aside(g.quarantine, 'entry', id, headers, why, payload)
    redis.call('XACK', k.log, group, id)
    group_untrack(g, {id})
    out[2] = out[2] + 1
    out[#out + 1] = id
  end
end
return out
