-- Renew holds (the watchdog: up to 100 per call).
--
-- One group of KEYS and ARGV per hold.
-- A renewal never lowers a TTL (lib/raise_ttl.lua): another hold of the
-- tenancy (a shared owner's, one extended past the lease) may rely on a
-- longer one. Two calls per hold. A hold is the requester's own: a
-- shared owner's holds of other clients (h fields, lib/holder.lua) never
-- renew it, so a hold a failover never had is lost though its owner
-- holds there. A hold's renewal is its client's share's too, and no
-- other's (lib/shares.lua).
-- KEYS[i] lock: the lock's hash of hold i
-- ARGV[3i-2] req: whose hold: the requester (its owner: lib/requester.lua)
-- ARGV[3i-1] lease_ms: the new lease (ms)
-- ARGV[3i] token: the hold's tenancy
-- returns: one per hold: 1 renewed | 0 gone | -1 another owner's tenancy
-- resend: no request id: a copy renews again from when it runs,
--   raising the TTL and the share only, never lowering them
--#flags allow-oom
--#include lib/now.lua
--#include lib/raise_ttl.lua
--#include lib/requester.lua
--#include lib/holder.lua
--#include lib/shares.lua
--#include lib/shares_due.lua
--#include lib/short.lua
local r, now = {}, nil
for i = 1, #KEYS do
  local k = KEYS[i]
  local req, lease, token = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local owner = owner_of(req)
  local hf = holder_field(owner, req)
  local v = not hf and redis.pcall('get', k)
  local sn, st, so
  if type(v) == 'string' then sn, st, so = v:match('^(%d+)|(%d+)|%d+|[%de]*|g?|(.+)$') end
  if sn then                            -- the short form: renewed as it is
    if sn ~= '0' and so == owner and st == token then
      raise_ttl(k, lease)
      r[i] = 1
    elseif sn ~= '0' then r[i] = -1
    else r[i] = 0 end
  else
    local f
    if hf then
      f = redis.pcall('hmget', k, 'o' .. owner, 't', hf, 'D')
      if f.err then                       -- the short form (lib/short.lua)
        unshort(k)
        f = redis.call('hmget', k, 'o' .. owner, 't', hf, 'D')
      end
      local shares_end = f[4]
      local ended, at = shares_due(k, shares_end)
      now = at or now
      if ended then f = redis.call('hmget', k, 'o' .. owner, 't', hf) end
    else
      f = redis.pcall('hmget', k, 'o' .. owner, 't')
      if f.err then
        unshort(k)
        f = redis.call('hmget', k, 'o' .. owner, 't')
      end
    end
    local held, t, own = f[1], f[2], f[3]
    if held and t == token then
      if hf and not own then r[i] = 0     -- its owner's, not its own
      else
        raise_ttl(k, lease)
        if hf then
          now = now or now_ms()
          share_until(k, hf, now + tonumber(lease))
        end
        r[i] = 1
      end
    elseif tonumber(redis.call('hget', k, 'n') or '0') > 0 then r[i] = -1
    else r[i] = 0 end
  end
end
return r
