--[[ group_quarantine_replay
  Put an entry set aside from a group (group_quarantine) back: appended to the stream as a
  new record, with its payload and the headers given (fixed ones, or none), and taken out
  of the quarantine. Every group of the stream sees it as a new record, as for a replayed
  dead letter. Wakes waiting readers.
  KEYS[1] log         STREAM  the records
  KEYS[2] meta        HASH    bytes: payload and header bytes held
  KEYS[3] wake        CHANNEL  sharded channel announcing records to read
  KEYS[4] quarantine  STREAM  the group's records set aside (lib/record.lua)
  ARGV[1] entry_id  the quarantine entry's id
  ARGV[2] headers   the headers to append it with (msgpack map, checked by the caller), or
                    '' for none
  Returns {status, new_id}   status: OK | NOT_FOUND (no such quarantine entry) |
          OUT_OF_RANGE (the entry is not a stream entry) | BAD_ARG
]]
--@include lib/status.lua
--@include lib/checked.lua
--@include lib/stream.lua
--@include lib/record.lua
local k = {log = KEYS[1], meta = KEYS[2], wake = KEYS[3], quarantine = KEYS[4]}
local entry_id = ARGV[1]
local headers = ARGV[2]

if not arg_stream_id(entry_id) then return {ST_BAD_ARG, 1} end
if headers ~= '' and not arg_map(headers) then return {ST_BAD_ARG, 2} end
local aside = record_set_aside(k.quarantine, entry_id)
if not aside then return {ST_NOT_FOUND} end
if aside[1] ~= 'entry' then return {ST_OUT_OF_RANGE} end
local id = stream_add(k.log, k.meta, aside[5], headers)
redis.call('XDEL', k.quarantine, entry_id)
redis.call('SPUBLISH', k.wake, '1')
return {ST_OK, id}
