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
-- resend: as renew's; a reader the first run took out (its lease over)
--   is gone: 0, or -1 while others hold
--#flags allow-oom
--#include lib/now.lua
--#include lib/raise_ttl.lua
--#include lib/requester.lua
--#include lib/holder.lua
--#include lib/shares.lua
--#include lib/shares_due.lua
--#include lib/short.lua
local now = now_ms()
local r = {}
for i = 1, #KEYS do
  local k = KEYS[i]
  local req, lease, token = ARGV[5 * i - 4], tonumber(ARGV[5 * i - 3]), ARGV[5 * i - 2]
  local chan, pub = ARGV[5 * i - 1], ARGV[5 * i]
  local o = owner_of(req)
  local hf = holder_field(o, req)
  local f = redis.pcall('hmget', k, 'o' .. o, 't', 'n', 'e' .. o, 'b', hf or 'b', hf and 'D' or 'b')
  if f.err then                         -- the short form (lib/short.lua)
    unshort(k)
    f = redis.call('hmget', k, 'o' .. o, 't', 'n', 'e' .. o, 'b', hf or 'b', hf and 'D' or 'b')
  end
  local shares_end = f[7]
  if hf and shares_due(k, shares_end) then   -- (lib/shares_due.lua)
    f = redis.call('hmget', k, 'o' .. o, 't', 'n', 'e' .. o, 'b', hf)
  end
  local held, t, n, own_end, busy, own = f[1], f[2], f[3], f[4], f[5], f[6]
  if held and own_end and tonumber(own_end) <= now then
    redis.call('hdel', k, 'o' .. o, 'e' .. o)
    for _, x in ipairs(redis.call('hkeys', k)) do  -- and its requesters'
      if x:sub(1, 1) == 'h' and owner_of(x:sub(2)) == o then
        redis.call('hdel', k, x, 'd' .. x:sub(2))  -- counts (lib/holder.lua)
      end
    end
    local left = math.max(tonumber(n or '0') - tonumber(held), 0)
    redis.call('hset', k, 'n', left)
    if left == 0 and tonumber(busy or '0') > now then
      redis.call(pub, chan, t or '0')
    end
    r[i] = 0
  elseif held and t == token and hf and not own then
    r[i] = 0                            -- its owner's, not its own (renew)
  elseif held and t == token then
    if own_end then   -- never lowered: a shared owner's other holds
      redis.call('hset', k, 'e' .. o, math.max(tonumber(own_end), now + lease))
    end
    raise_ttl(k, ARGV[5 * i - 3])
    if hf then share_until(k, hf, now + lease) end
    r[i] = 1
  elseif tonumber(n or '0') > 0 then r[i] = -1
  else r[i] = 0 end
end
return r
