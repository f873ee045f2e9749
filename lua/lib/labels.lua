--[[ lib/labels
  Label routing: a run with labels goes only to a worker whose labels hold every key with
  an equal value. Values arrive type-tagged from Python ("i:1", "f:1.0", "s:x", "b:true";
  arrays and objects as "x:", which never matches), so int, float, string and bool differ.
]]
local function labels_match(run_labels, worker_labels)
  if run_labels == nil then return true end
  if worker_labels == nil then return false end
  for key, want in pairs(run_labels) do
    local have = worker_labels[key]
    if have == nil or have ~= want or string.sub(want, 1, 2) == 'x:' then return false end
  end
  return true
end
