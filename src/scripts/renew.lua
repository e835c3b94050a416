-- Renew holds (the watchdog: up to 100 per call).
--
-- One group of KEYS and ARGV per hold.
-- A renewal never lowers a TTL (lib/raise_ttl.lua): another hold of the
-- tenancy (a shared owner's, one extended past the lease) may rely on a
-- longer one. Two calls per hold.
-- KEYS[i] lock: the lock's hash of hold i
-- ARGV[3i-2] owner: whose hold
-- ARGV[3i-1] lease_ms: the new lease (ms)
-- ARGV[3i] token: the hold's tenancy
-- returns: one per hold: 1 renewed | 0 gone | -1 another owner's tenancy
--#include lib/raise_ttl.lua
local r = {}
for i = 1, #KEYS do
  local k = KEYS[i]
  local owner, lease, token = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local f = redis.call('hmget', k, 'o' .. owner, 't')
  if f[1] and f[2] == token then
    raise_ttl(k, lease)
    r[i] = 1
  elseif tonumber(redis.call('hget', k, 'n') or '0') > 0 then r[i] = -1
  else r[i] = 0 end
end
return r
