-- Take one permit of a semaphore, its queue only where it is: while its slot migrates.
--
-- For an acquire while its slot is mid-migration (TRYAGAIN: the semaphore
-- and its queue are not both on this node; an empty queue counts as
-- missing). As sem_acquire does (a permit needs no token, so a fresh one
-- may be taken here too), with the queue only if it is here
-- (lib/here.lua, lib/permit.lua).
-- KEYS[1] lock: the semaphore's hash, P{name}
-- ARGV[1] owner: as acquire's
-- ARGV[2] req: as acquire's
-- ARGV[3] seq: as acquire's
-- ARGV[4] lease_ms: as acquire's
-- ARGV[5] expect: as acquire's
-- ARGV[6] token: as acquire's (0: permits have none)
-- ARGV[7] permits: as sem_acquire's
-- ARGV[8] waits: as sem_acquire's
-- returns: as sem_acquire's
-- resend: as sem_acquire's
--#include lib/permit.lua
--#include lib/here.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local permits, waits = ARGV[7], ARGV[8]
return acquire_permit(KEYS[1], here(KEYS[1] .. ':q'), owner, req, seq, lease, expect,
                      token, permits, waits)
