--#include lib/short_view.lua
-- unshort(k): lock k, if in its short form, becomes the hash it stands
-- for, with the same TTL: at least 1 ms (one in its last ms is not left
-- without one), none only if the short form had none. A script that may
-- meet the short form calls this before it reads k. Deleting first is
-- safe under maxmemory: Redis refuses only a script's first write.
-- In a Cluster slot mid-migration Redis refuses a write to a key it does
-- not have, so the hash cannot follow the delete there: that node answers
-- TRYAGAIN, and the lock converts once the slot has moved (a key that
-- never exists is the probe). A TTL longer than 2^52 ms (142,000 years)
-- becomes 2^52 ms: Lua's numbers hold no more exactly.
local function unshort(k)
  local h = short_view(k)
  if not h then return end
  if type(redis.pcall('exists', k .. ':short')) ~= 'number' then
    error({ err = 'TRYAGAIN the lock is in its short form and its slot is migrating' })
  end
  local ttl = redis.call('pttl', k)
  redis.call('del', k)
  redis.call('hset', k, unpack(h))
  if ttl >= 0 then
    redis.call('pexpire', k, string.format('%d', math.min(math.max(ttl, 1), 4503599627370496)))
  end
end
