-- A lock's TTL while it is held.
-- KEYS[1] lock: the lock's hash, P{name}
-- returns: its PTTL while held (-1: none) | -2 free
local k = KEYS[1]
if tonumber(redis.call('hget', k, 'n') or '0') > 0 then
  return redis.call('pttl', k)
end
return -2
