-- Release one hold of an exclusive lock.
--
-- A freed lock keeps its record for a resend until its TTL runs out (the
-- lease of the hold released: its client resends no later), and tells
-- the waiters, while a busy acquire's wait may last (lib/waiter.lua).
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: whose hold it is
-- ARGV[2] req: the requester
-- ARGV[3] seq: the request id
-- ARGV[4] token: the hold's tenancy
-- ARGV[5] keep_ms: the hold's lease (ms): its record outlives prunes 2x that
-- ARGV[6] chan: where a freed lock is announced, P{name}:ch
-- ARGV[7] pub: PUBLISH or SPUBLISH (Cluster)
-- returns: {1, count left} | {-1} lost
-- resend: finds its seq recorded: answers {1, the owner's holds now}
--   and changes nothing (no second announcement); once the record's
--   TTL ran out, {-1} lost
--#include lib/release.lua
local owner, req, seq, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_ms, chan, pub = ARGV[5], ARGV[6], ARGV[7]
local k = KEYS[1]
local reply, left, waiters = release(k, owner, req, seq, token, keep_ms)
if left == 0 and waiters then redis.call(pub, chan, token) end
return reply
