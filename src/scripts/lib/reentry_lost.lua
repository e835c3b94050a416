-- reentry_lost(expect, token, mine, t): whether a reentry (expect > 0:
-- the count of the hold it joins) finds its hold gone (mine holds now,
-- of tenancy t; token: the tenancy it joins).
local function reentry_lost(expect, token, mine, t)
  return expect > 0 and (mine == 0 or t ~= tonumber(token))
end
