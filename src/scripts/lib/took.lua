-- took(counter, expect, mine, t): the reply of an acquire that took a
-- hold: {1, mine, t}; for a fresh acquire (expect 0) that joined its
-- owner's tenancy (mine > 1, a shared owner), with the slot's counter
-- too: {1, mine, t, counter}. On Redlock a grant keeps a joined
-- tenancy's token only where the counters of a quorum of its masters
-- show that nothing above it was minted or fenced there since (exec.c,
-- grant_token): a tenancy joined from holds that no quorum granted
-- together may be older than a later owner's.
local function took(counter, expect, mine, t)
  if counter and expect == 0 and mine > 1 then
    return {1, mine, t, tonumber(redis.call('get', counter) or '0')}
  end
  return {1, mine, t}
end
