-- Set a held lock's TTL to a new lease.
--
-- An explicit owner's other clients may rely on a longer lease: theirs is
-- raised only. The hold is the requester's own, as renew's, and so is
-- the share it lengthens (lib/shares.lua).
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] req: whose hold: the requester (its owner: lib/requester.lua)
-- ARGV[2] lease_ms: the new lease (ms)
-- ARGV[3] token: the hold's tenancy
-- returns: 1 | 0 the hold is gone
-- resend: no request id: a copy extends again, the lease counted from
--   when it runs (0 once the hold is gone)
--#flags allow-oom
--#include lib/now.lua
--#include lib/requester.lua
--#include lib/holder.lua
--#include lib/shares.lua
--#include lib/shares_due.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local req, lease, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local k = KEYS[1]
local owner = owner_of(req)
local hf = holder_field(owner, req)
local f = redis.call('hmget', k, 'o' .. owner, 't', hf or 't', hf and 'D' or 't')
local held, t, own, shares_end = f[1], f[2], f[3], f[4]
if hf and shares_due(k, shares_end) then
  f = redis.call('hmget', k, 'o' .. owner, 't', hf)
  held, t, own = f[1], f[2], f[3]
end
if held and t == token and (not hf or own) then
  if not hf then return redis.call('pexpire', k, lease) end
  share_until(k, hf, now_ms() + lease)
  if redis.call('pttl', k) < lease then redis.call('pexpire', k, lease) end
  return 1
end
return 0
