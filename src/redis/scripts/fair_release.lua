-- Release one hold of a fair lock; pass a freed one on.
--
-- As release does; a freed lock goes to the first live waiter
-- (README.md, THE FAIR LOCK).
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] counter: the fencing counter of its slot (a grant's token)
-- KEYS[3] queue: its waiters, P{name}:q
-- ARGV[1] owner: as release's
-- ARGV[2] req: as release's
-- ARGV[3] seq: as release's
-- ARGV[4] token: as release's
-- ARGV[5] keep_ms: as release's
-- ARGV[6] pub: PUBLISH or SPUBLISH, for the grant (a fair lock wakes its
--   next holder only, on that one's channel: it takes no channel)
-- returns: as release's
-- resend: as release's: answered from the record, nothing passed on
--   again
--#flags allow-oom
--#include lib/release.lua
--#include lib/hand_over.lua
--#include lib/clear_grant.lua
local owner, req, seq, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_ms, pub = tonumber(ARGV[5]), ARGV[6]
local k, counter, q = KEYS[1], KEYS[2], KEYS[3]
local reply, left = release(k, owner, req, seq, token, keep_ms)
if left == 0 then hand_over(k, counter, q, keep_ms, pub, 'q' .. req)  -- (g: cleared)
elseif left then clear_grant(k, req) end
return reply
