-- granted(mine, t): the reply to a hold of mine holds in tenancy t: t
-- alone at 1 (an integer: Redis makes no table of it to reply with), else
-- {1, mine, t}.
local function granted(mine, t)
  if mine == 1 then return t end
  return {1, mine, t}
end
