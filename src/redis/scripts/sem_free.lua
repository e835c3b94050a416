-- How many of a semaphore's permits are free.
-- KEYS[1] lock: the semaphore's hash, P{name}
-- ARGV[1] permits: its size, as this client names it (Redis's, while held)
-- returns: the free permits, >= 0
--#include lib/now.lua
--#include lib/hash.lua
local permits = tonumber(ARGV[1])
local now = now_ms()
local h, used = read_hash(KEYS[1]), 0
for name, v in pairs(h) do
  if name:sub(1, 1) == 'e' and tonumber(v) > now and
     tonumber(h['o' .. name:sub(2)] or '0') > 0 then used = used + 1 end
end
if tonumber(h.n or '0') > 0 and h.l then permits = tonumber(h.l) end
return math.max(permits - used, 0)
