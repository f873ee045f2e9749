--[[ lib/priority
  Priority order in a sorted set: the score priority * 2^45 + seq sorts lower priorities
  first, then by seq (arrival order). Sequence numbers stay below 2^45 and priorities at
  most 255, so every score is exact in a double (below 2^53).
]]
local PRIORITY_SEQ_SPAN = 35184372088832
local PRIORITY_MAX = 255

-- The sorted-set score of sequence number `seq` at priority `p`.
local function priority_score(p, seq)
  return p * PRIORITY_SEQ_SPAN + seq
end
