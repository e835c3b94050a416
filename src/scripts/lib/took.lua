-- took(k, counter, expect, mine, t): the reply of an acquire of lock k
-- that took a hold: {1, mine, t}; for a fresh acquire (expect 0) that
-- joined its owner's tenancy (mine > 1, a shared owner), with the slot's
-- counter and the tenancy's founder (lib/founder.lua) too: {1, mine, t,
-- counter, founder}. On Redlock a grant keeps a joined tenancy's token
-- only where a quorum of masters agree on that tenancy, its founder
-- included: holds that no quorum granted together (each left on one
-- master by a co-owner's attempt that failed and was never undone) may
-- agree on a token by chance, below a later owner's (exec.c,
-- grant_token). The counter bounds the token taken then.
local function took(k, counter, expect, mine, t)
  if counter and expect == 0 and mine > 1 then
    return {1, mine, t, tonumber(redis.call('get', counter) or '0'),
            redis.call('hget', k, 'f') or ''}
  end
  return {1, mine, t}
end
