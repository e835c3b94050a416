-- Renew holds (the watchdog: up to 100 per call).
--
-- One group of KEYS and ARGV per hold.
-- A renewal never lowers a TTL: another hold of the tenancy (a shared
-- owner's) may rely on a longer one.
-- KEYS[i] lock: the lock's hash of hold i
-- ARGV[3i-2] owner: whose hold
-- ARGV[3i-1] lease_ms: the new lease (ms)
-- ARGV[3i] token: the hold's tenancy
-- returns: one per hold: 1 renewed | 0 gone | -1 another owner's tenancy
local r = {}
for i = 1, #KEYS do
  local k = KEYS[i]
  local owner, lease, token = ARGV[3 * i - 2], tonumber(ARGV[3 * i - 1]), ARGV[3 * i]
  local f = redis.call('hmget', k, 'o' .. owner, 't', 'n')
  if f[1] and f[2] == token then
    if redis.call('pttl', k) < lease then
      redis.call('pexpire', k, lease)
    end
    r[i] = 1
  elseif tonumber(f[3] or '0') > 0 then r[i] = -1
  else r[i] = 0 end
end
return r
