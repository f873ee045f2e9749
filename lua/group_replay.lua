--[[ group_replay
  Append dead letters of a group back to its stream as new records (same payload and
  headers), removing them from the dead letters. Every group of the stream sees them as
  new records; the original ids stay retired. Wakes waiting readers. A caller that may
  append but not delete dead letters is refused (NOPERM) before anything is written,
  not left with each record twice.
  KEYS[1] log   STREAM   the records
  KEYS[2] meta  HASH     bytes: payload and header bytes held
  KEYS[3] dead  STREAM   the group's dead letters
  KEYS[4] wake  CHANNEL  sharded channel announcing records to read
  ARGV[1] ids    msgpack list of dead-letter ids, or '' for the oldest `count`
  ARGV[2] count  at most this many (1..1000)
  Returns {status, n, (dead_letter_id, new_id) * n}   status: OK
]]
--@include lib/status.lua
--@include lib/stream.lua
--@include lib/checked.lua
local k = {log = KEYS[1], meta = KEYS[2], dead = KEYS[3], wake = KEYS[4]}
local ids = ARGV[1]
local count = arg_int(ARGV[2], 1, BATCH_MAX)

if ids ~= '' then
  ids = arg_stream_ids(ids, BATCH_MAX)
  if not ids then return {ST_BAD_ARG, 1} end
end
if not count then return {ST_BAD_ARG, 2} end
local letters = {}
if ids == '' then
  letters = redis.call('XRANGE', k.dead, '-', '+', 'COUNT', count)
else
  for _, id in ipairs(ids) do

    if #letters >= count then break end
    local found = redis.call('XRANGE', k.dead, id, id)
    if #found > 0 then letters[#letters + 1] = found[1] end
  end
end

if #letters > 0 and not redis.acl_check_cmd('XDEL', k.dead, letters[1][1]) then
  return redis.error_reply("NOPERM this user has no permissions to run the 'xdel' command")
end
local out = {ST_OK, #letters}
for _, letter in ipairs(letters) do
  local payload, headers = stream_fields(letter[2])
  local id = stream_add(k.log, k.meta, payload, headers)
  redis.call('XDEL', k.dead, letter[1])
  out[#out + 1] = letter[1]
  out[#out + 1] = id
end
if #letters > 0 then redis.call('SPUBLISH', k.wake, '1') end
return out
