--#include lib/raise_ttl.lua
--#include lib/shares.lua
-- fair_join(k, of, hf, qf, req, seq, n, lease, now, g): one more hold of
-- fair lock k's tenancy (n holds in all) for requester req, as request
-- seq, for lease ms from now (hf: its h field, lib/holder.lua; g: the
-- lock's g field as read: the grant it takes up, if req's). Returns the
-- owner's holds (field of) now.
local function fair_join(k, of, hf, qf, req, seq, n, lease, now, g)
  local mine = redis.call('hincrby', k, of, 1)
  if hf then
    redis.call('hincrby', k, hf, 1)
    share_until(k, hf, now + lease)
  end
  redis.call('hset', k, 'n', n + 1, qf, seq, 'k' .. req, now + 2 * lease)
  if g == req then redis.call('hdel', k, 'g') end
  raise_ttl(k, lease)
  return mine
end
