-- Renew holds with leases of their own (read-write, semaphore).
--
-- As renew does, one group per hold: a reader's own lease is
-- renewed too, unless it already ran out (then the reader is gone: taken
-- out, answered 0). A lock freed so is announced as a release announces
-- it, while a waiter may listen (b: lib/waiter.lua; a semaphore sets no
-- b, its waiters come back within a second).
-- KEYS[i] lock: the lock's hash of hold i
-- ARGV[5i-4] req: whose hold: the requester (as renew's)
-- ARGV[5i-3] lease_ms: the new lease (ms)
-- ARGV[5i-2] token: the hold's tenancy
-- ARGV[5i-1] chan: where a freed lock is announced, P{name}:ch
-- ARGV[5i] pub: PUBLISH or SPUBLISH (Cluster)
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
  local req, lease, token = ARGV[5 * i - 4], tonumber(ARGV[5 * i - 3]), ARGV[5 * i - 2]
  local chan, pub = ARGV[5 * i - 1], ARGV[5 * i]
  local o = owner_of(req)
  local hf = holder_field(o, req)
  local f = redis.call('hmget', k, 'o' .. o, 't', 'n', 'e' .. o, 'b', hf or 'b', hf and 'D' or 'b')
  if hf and shares_due(k, f[7]) then   -- (lib/shares_due.lua)
    f = redis.call('hmget', k, 'o' .. o, 't', 'n', 'e' .. o, 'b', hf)
  end
  if f[1] and f[4] and tonumber(f[4]) <= now then
    redis.call('hdel', k, 'o' .. o, 'e' .. o)
    for _, x in ipairs(redis.call('hkeys', k)) do  -- and its requesters'
      if x:sub(1, 1) == 'h' and owner_of(x:sub(2)) == o then
        redis.call('hdel', k, x, 'd' .. x:sub(2))  -- counts (lib/holder.lua)
      end
    end
    local n = math.max(tonumber(f[3] or '0') - tonumber(f[1]), 0)
    redis.call('hset', k, 'n', n)
    if n == 0 and tonumber(f[5] or '0') > now then
      redis.call(pub, chan, f[2] or '0')
    end
    r[i] = 0
  elseif f[1] and f[2] == token and hf and not f[6] then
    r[i] = 0                            -- its owner's, not its own (renew)
  elseif f[1] and f[2] == token then
    if f[4] then   -- never lowered: a shared owner's other holds
      redis.call('hset', k, 'e' .. o, math.max(tonumber(f[4]), now + lease))
    end
    raise_ttl(k, ARGV[5 * i - 3])
    if hf then share_until(k, hf, now + lease) end
    r[i] = 1
  elseif tonumber(f[3] or '0') > 0 then r[i] = -1
  else r[i] = 0 end
end
return r
