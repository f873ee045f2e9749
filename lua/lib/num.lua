--[[ lib/num
  Numbers handed to redis.call. Redis turns a Lua number argument into text with
  printf("%.17g") (about 3,000 instructions each; in a batch of 100 leases or scores that
  is a fifth of a claim), while a string argument is passed as it is. So a script that
  sends many numbers (scores, counters) sends them as text, made with an integer format
  (a tenth of the cost), once per value where one value repeats.
]]

-- `n` (an integer below 2^53) as the decimal text Redis would parse back to it.
local function num_arg(n)
  return string.format('%d', n)
end
