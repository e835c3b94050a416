-- Raise a slot's fencing counter (and a hold's token) to a token.
--
-- Redlock's masters agree on the highest token of a grant's quorum
-- (exec.c).
-- KEYS[1] counter: the fencing counter, P{tag}:fence
-- KEYS[2] lock: the lock's hash, P{name}
-- ARGV[1] token: the token to raise them to
-- ARGV[2] req: whose hold takes the token: the requester's own (where
--   it has none, a shared owner's other clients keep theirs)
-- ARGV[3] seq: the acquire that asks (its request id): where it is the
--   requester's last request and its hold the only one (it began that
--   tenancy here), the hold takes the token even if lower: a master whose
--   reply did not count (lost, late) may have minted a token above the
--   grant's, and that one was granted to nobody
-- returns: 1
-- resend: finds the counter and the hold's token already raised to
--   token: changes nothing
--#include lib/requester.lua
--#include lib/holder.lua
--#include lib/short.lua
unshort(KEYS[2])                 -- (lib/short.lua)
local token, req, seq = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local counter, k = KEYS[1], KEYS[2]
local owner = owner_of(req)
local of = 'o' .. owner
if tonumber(redis.call('get', counter) or '0') < token then
  redis.call('set', counter, ARGV[1])
end
-- Only ever up, but for that one hold: a late copy of an earlier
-- tenancy's fence must not lower a later tenancy's token (its release
-- would then be told "lost"), and a later request has another seq. The
-- requester's hold: its owner's, and its own (h, for a shared owner).
local f = redis.call('hmget', k, of, holder_field(owner, req) or of, 't', 'n', 'q' .. req)
local held, own, t, n, record = f[1], f[2], tonumber(f[3] or '0'), f[4], f[5]
if held and own and (t < token or (t > token and n == '1' and record == seq)) then
  redis.call('hset', k, 't', ARGV[1])
end
return 1
