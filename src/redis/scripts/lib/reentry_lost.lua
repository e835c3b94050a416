-- reentry_lost(k, hf, expect, token, mine, t): whether a reentry (expect
-- > 0: the count of the hold it joins) finds its hold gone (mine holds of
-- its owner now, of tenancy t; token: the tenancy it joins). With hf
-- (lib/holder.lua), the requester's own holds must be there too: a shared
-- owner's other clients' holds are not this one's (after a failover that
-- kept theirs and lost its own).
local function reentry_lost(k, hf, expect, token, mine, t)
  if expect <= 0 then return false end
  if mine == 0 or t ~= tonumber(token) then return true end
  return hf ~= nil and redis.call('hexists', k, hf) == 0
end
