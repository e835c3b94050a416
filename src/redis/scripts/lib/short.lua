--#include lib/short_view.lua
-- unshort(k): lock k, if in its short form, becomes the hash it stands
-- for, with the same TTL: at least 1 ms (one in its last ms is not left
-- without one), none only if the short form had none. A script that may
-- meet the short form calls this before it reads k. Deleting first is
-- safe under maxmemory: Redis refuses only a script's first write.
local function unshort(k)
  local h = short_view(k)
  if not h then return end
  local ttl = redis.call('pttl', k)
  redis.call('del', k)
  redis.call('hset', k, unpack(h))
  if ttl >= 0 then redis.call('pexpire', k, math.max(ttl, 1)) end
end
