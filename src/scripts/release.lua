-- Release one hold of an exclusive lock.
--
-- A freed lock keeps its record for a resend and announces it to the
-- waiters.
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: whose hold it is
-- ARGV[2] req: the requester
-- ARGV[3] seq: the request id
-- ARGV[4] token: the hold's tenancy
-- ARGV[5] keep_ms: how long a freed lock keeps its record (ms)
-- ARGV[6] chan: where a freed lock is announced, P{name}:ch
-- ARGV[7] pub: PUBLISH or SPUBLISH (Cluster)
-- returns: {1, count left} | {-1} lost
--#include lib/release.lua
--#include lib/announce.lua
local owner, req, seq, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_ms, chan, pub = tonumber(ARGV[5]), ARGV[6], ARGV[7]
local k = KEYS[1]
local reply, left = release(k, owner, req, seq, token, keep_ms)
if left == 0 then announce(k, keep_ms, chan, pub, token) end
return reply
