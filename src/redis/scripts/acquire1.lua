-- acquire, without the counter: a reentry while its slot migrates.
--
-- For a reentry while its slot is mid-migration (TRYAGAIN: the lock and its counter are on two nodes for
-- now). A reentry mints nothing; a new tenancy needs the counter (a token
-- minted without it could come out below a later one), so a fresh
-- acquire is not sent here (op.c), and is told busy if it is.
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: as acquire's
-- ARGV[2] req: as acquire's
-- ARGV[3] seq: as acquire's
-- ARGV[4] lease_ms: as acquire's
-- ARGV[5] expect: as acquire's
-- ARGV[6] token: as acquire's
-- returns: as acquire's; {0, 10} for a new tenancy
-- resend: as acquire's
--#include lib/exclusive.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = ARGV[4], tonumber(ARGV[5]), ARGV[6]
return acquire_exclusive(KEYS[1], nil, owner, req, seq, lease, expect, token, -1)
