-- drop_unknown(k, owner, req, expect, mine, n): a fresh acquire (expect 0)
-- by a coroutine owner (owner = requester: one client's own) that finds
-- holds of that owner finds a hold its client does not know of: a copy a
-- failover or a restore brought back, or one its client gave up as lost.
-- It is dropped, never joined (joined, it would count one hold too many,
-- and never free). An explicit owner's fresh acquire joins: that is what
-- sharing it means. Returns n (holds in all) and mine, as they are now.
local function drop_unknown(k, owner, req, expect, mine, n)
  if mine > 0 and expect == 0 and owner == req then
    redis.call('hdel', k, 'o' .. owner, 'e' .. owner)
    n, mine = math.max(n - mine, 0), 0
    redis.call('hset', k, 'n', n)
  end
  return n, mine
end
