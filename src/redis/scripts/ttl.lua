-- A lock's TTL while it is held.
-- KEYS[1] lock: the lock's hash, P{name}
-- returns: its PTTL while held (-1: none) | -2 free
--#include lib/short_view.lua
local k = KEYS[1]
local n = redis.pcall('hget', k, 'n')
if type(n) == 'table' then n = short_view(k)[2] end   -- the short form's n
if tonumber(n or '0') > 0 then
  return redis.call('pttl', k)
end
return -2
