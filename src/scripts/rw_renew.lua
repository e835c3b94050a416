-- Renew holds with leases of their own (read-write, semaphore).
--
-- As renew does, one group per hold: a reader's own lease is
-- renewed too, unless it already ran out (then the reader is gone: taken
-- out, answered 0).
-- KEYS[i] lock: the lock's hash of hold i
-- ARGV[3i-2] req: whose hold: the requester (as renew's)
-- ARGV[3i-1] lease_ms: the new lease (ms)
-- ARGV[3i] token: the hold's tenancy
-- returns: one per hold, as renew's
--#include lib/now.lua
--#include lib/raise_ttl.lua
--#include lib/requester.lua
--#include lib/holder.lua
--#include lib/shares.lua
--#include lib/shares_due.lua
local now = now_ms()
local r = {}
for i = 1, #KEYS do
  local k = KEYS[i]
  local req, lease, token = ARGV[3 * i - 2], tonumber(ARGV[3 * i - 1]), ARGV[3 * i]
  local o = owner_of(req)
  local hf = holder_field(o, req)
  local f
  if hf then
    f = redis.call('hmget', k, 'o' .. o, 't', 'n', 'e' .. o, hf, 'D')
    if shares_due(k, f[6]) then f = redis.call('hmget', k, 'o' .. o, 't', 'n', 'e' .. o, hf) end
  else f = redis.call('hmget', k, 'o' .. o, 't', 'n', 'e' .. o) end
  if f[1] and f[4] and tonumber(f[4]) <= now then
    redis.call('hdel', k, 'o' .. o, 'e' .. o)
    for _, x in ipairs(redis.call('hkeys', k)) do  -- and its requesters'
      if x:sub(1, 1) == 'h' and owner_of(x:sub(2)) == o then
        redis.call('hdel', k, x, 'd' .. x:sub(2))  -- counts (lib/holder.lua)
      end
    end
    redis.call('hset', k, 'n', math.max(tonumber(f[3] or '0') - tonumber(f[1]), 0))
    r[i] = 0
  elseif f[1] and f[2] == token and hf and not f[5] then
    r[i] = 0                            -- its owner's, not its own (renew)
  elseif f[1] and f[2] == token then
    if f[4] then   -- never lowered: a shared owner's other holds
      redis.call('hset', k, 'e' .. o, math.max(tonumber(f[4]), now + lease))
    end
    raise_ttl(k, ARGV[3 * i - 1])
    if hf then share_until(k, hf, now + lease) end
    r[i] = 1
  elseif tonumber(f[3] or '0') > 0 then r[i] = -1
  else r[i] = 0 end
end
return r
