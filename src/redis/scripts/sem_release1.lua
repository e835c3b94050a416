-- Release one permit of a semaphore, its queue only where it is: while its slot migrates.
--
-- For a release while its slot is mid-migration (TRYAGAIN: the semaphore
-- and its queue are not both on this node; an empty queue counts as
-- missing). As sem_release does; the first waiter is woken only if the
-- queue is here (lib/here.lua). A waiter that is not woken looks again
-- within 1 s (sem_acquire.lua) and takes the permit then.
-- KEYS[1] lock: the semaphore's hash, P{name}
-- ARGV[1] owner: as release's
-- ARGV[2] req: as release's
-- ARGV[3] seq: as release's
-- ARGV[4] token: as release's
-- ARGV[5] keep_ms: as release's
-- ARGV[6] chan: as release's
-- ARGV[7] pub: as release's
-- returns: as release's
-- resend: as sem_release's
--#flags allow-oom
--#include lib/release.lua
--#include lib/announce.lua
--#include lib/wake.lua
--#include lib/here.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_ms, chan, pub = tonumber(ARGV[5]), ARGV[6], ARGV[7]
local k = KEYS[1]
local reply, left = release(k, owner, req, seq, token, keep_ms)
if left == 0 then announce(k, keep_ms, chan, pub, token) end
local q = left and here(k .. ':q')
if q then wake(k, q, pub) end
return reply
