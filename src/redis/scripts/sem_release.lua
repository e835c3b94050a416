-- Release one permit of a semaphore; wake one waiter.
--
-- As release does; a freed permit wakes one waiter: the first live one in the queue, through its client's
-- channel (P{name}:ch:<client id>; the requester starts with the client id).
-- KEYS[1] lock: the semaphore's hash, P{name}
-- KEYS[2] queue: its waiters, P{name}:q
-- ARGV[1] owner: as release's
-- ARGV[2] req: as release's
-- ARGV[3] seq: as release's
-- ARGV[4] token: as release's
-- ARGV[5] keep_ms: as release's
-- ARGV[6] chan: as release's
-- ARGV[7] pub: as release's
-- returns: as release's
-- resend: as release's: answered from the record, nobody woken again
--#flags allow-oom
--#include lib/release.lua
--#include lib/announce.lua
--#include lib/wake.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_ms, chan, pub = tonumber(ARGV[5]), ARGV[6], ARGV[7]
local k, q = KEYS[1], KEYS[2]
local reply, left = release(k, owner, req, seq, token, keep_ms)
if left == 0 then announce(k, keep_ms, chan, pub, token) end
if left then wake(k, q, pub) end
return reply
