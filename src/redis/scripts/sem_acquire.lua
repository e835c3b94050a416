-- Take one permit of a semaphore.
-- The lock's hash with one holder per permit (o<id> = 1, e<id> = the end
-- of its lease, ms, server time; t = 0: permits have no fencing token;
-- l = the number of permits while held), and the queue, a sorted set of
-- the requesters waiting for a permit, scored by the end of their
-- registration. A busy answer's TTL is the time to the first permit's
-- end, at most 1 s: the waiter comes back by then, which renews its
-- registration (3 s), so a dead waiter leaves the queue by itself; one
-- that gives up leaves it with its last try.
-- KEYS[1] lock: the semaphore's hash, P{name}
-- KEYS[2] queue: its waiters, P{name}:q
-- ARGV[1] owner: as acquire's
-- ARGV[2] req: as acquire's
-- ARGV[3] seq: as acquire's
-- ARGV[4] lease_ms: as acquire's
-- ARGV[5] expect: as acquire's
-- ARGV[6] token: as acquire's (0: permits have none)
-- ARGV[7] permits: the semaphore's size, as this client names it
-- ARGV[8] waits: "1": the caller waits if busy (it is queued), "0": it
--   does not (a try, or a wait's last try: it leaves the queue)
-- returns: {1, count, 0} | {0, ms} busy | {-1} lost | {-2} cancelled or
--   stale | an error when Redis keeps another size
-- resend: as acquire's; a copy of an attempt that queued ("<seq>w") is
--   told busy again and changes nothing
--#include lib/permit.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local permits, waits = ARGV[7], ARGV[8]
return acquire_permit(KEYS[1], KEYS[2], owner, req, seq, lease, expect, token, permits, waits)
