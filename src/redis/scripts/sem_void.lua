-- Cancel a semaphore acquire whose reply was lost, and leave its queue.
--
-- As void does; and the attempt's place in the queue goes too (it
-- queued if it ran busy, and a copy of it that comes later is refused),
-- and a permit it took, given back, wakes the next waiter, as a release's.
-- KEYS[1] lock: the semaphore's hash, P{name}
-- KEYS[2] queue: its waiters, P{name}:q
-- ARGV[1] owner: as void's
-- ARGV[2] req: as void's
-- ARGV[3] seq: as void's
-- ARGV[4] keep_ms: as void's
-- ARGV[5] chan: as void's
-- ARGV[6] pub: as void's; the next waiter is woken with it too
-- returns: 1
-- resend: as void's
--#flags allow-oom
--#include lib/cancel.lua
--#include lib/announce.lua
--#include lib/wake.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local keep_ms, chan, pub = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local k, q = KEYS[1], KEYS[2]
local f = record_cancel(k, owner, req, seq, keep_ms)
if not f then return 1 end
redis.call('zrem', q, req)
local left = undo_acquire(k, owner, req, seq, keep_ms, false, f)
if left == 0 then announce(k, keep_ms, chan, pub, 'void') end
if left then wake(k, q, pub) end
return 1
