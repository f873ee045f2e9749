--[[ lib/slots
  Concurrency slots of an action: a msgpack record per slot index in `slots`, {o owner,
  t token, d deadline ms, sx suspect since ms} while held, {r token} once released or
  {x token} once taken back. A record that does not decode (or whose owner, token or
  deadline is not of its type) reads as false: slot_acquire sets it aside and takes the
  slot as free; a release is refused BAD_RECORD; a reclaim finds nothing held.
]]
--@include lib/record.lua

-- The slot record `raw` decoded: its table, or false and why the scripts cannot use it.
local function slot_decode(raw)
  local holder, why = record_decode(raw)
  if not holder then return false, why end
  if holder.o ~= nil and (type(holder.o) ~= 'string' or type(holder.t) ~= 'number'
      or type(holder.d) ~= 'number' or (holder.sx and type(holder.sx) ~= 'number')) then
    return false, 'not a slot record: owner, token or deadline not of their types'
  end
  return holder
end
