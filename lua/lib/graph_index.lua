--[[ lib/graph_index
  Reading a queue's dependency index (`graph_idx`, lib/graph.lua): all its entries at
  score 0, so ZRANGE BYLEX pages those of one run by their common prefix.
]]

-- The next `n` entries of `idx_key` that start with `prefix` (which ends with a NUL),
-- after `from` (the rest of the last entry read, exclusive; nil: from the first).
local function graph_index_page(idx_key, prefix, from, n)
  local first = from and ('(' .. prefix .. from) or ('[' .. prefix)
  return redis.call('ZRANGE', idx_key, first, '(' .. string.sub(prefix, 1, -2) .. '\1',
    'BYLEX', 'LIMIT', 0, n)
end
