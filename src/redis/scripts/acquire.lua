-- Take one hold of an exclusive lock.
--
-- A new tenancy with a new fencing token, or one more hold of the
-- caller's (README.md: DATA, RESENDS).
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] counter: the fencing counter of its slot, P{tag}:fence
-- ARGV[1] owner: whose hold it is
-- ARGV[2] req: the requester, "<client id>|<owner>" or the owner
-- ARGV[3] seq: the request id (new per attempt, the same in a resend)
-- ARGV[4] lease_ms: the lease (ms)
-- ARGV[5] expect: the count of the hold a reentry joins; 0: a fresh hold
-- ARGV[6] token: the token of the hold a reentry joins
-- ARGV[7] waited: how long (ms) the caller has waited so far; -1: it
--   will not wait (lib/waiter.lua)
-- returns: {1, count, token} | {0, wait_ms} busy (the holder's TTL, or
--   a reservation's for another waiter) | {-1} lost (the hold
--   the client believes in is gone, or another tenancy's) | {-2}
--   cancelled or stale
-- resend: finds its seq recorded once it took a hold: answers {1, count,
--   token} again ({-1} if that hold is gone since) and changes nothing;
--   a later request's record makes it {-2}; a busy run leaves no record
--   of its seq, so a copy of it tries again
--#include lib/exclusive.lua
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = ARGV[4], tonumber(ARGV[5]), ARGV[6]
local waited = tonumber(ARGV[7])
return acquire_exclusive(KEYS[1], KEYS[2], owner, req, seq, lease, expect, token, waited)
