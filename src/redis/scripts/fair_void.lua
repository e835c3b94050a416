-- Cancel an acquire of a fair lock, and leave its queue.
--
-- As void does, and leave the queue; a freed lock (or a grant taken back) goes to the next live waiter.
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] counter: the fencing counter of its slot (a grant's token)
-- KEYS[3] queue: its waiters, P{name}:q
-- ARGV[1] owner: as void's
-- ARGV[2] req: as void's
-- ARGV[3] seq: as void's
-- ARGV[4] keep_ms: as void's
-- ARGV[5] pub: PUBLISH or SPUBLISH, for a grant
-- ARGV[6] fresh: '1': the attempt expected no hold, so a grant to the
--   requester that its client never saw is taken back too (lib/cancel.lua)
-- returns: 1
-- resend: as void's
--#flags allow-oom
--#include lib/cancel.lua
--#include lib/unqueue.lua
--#include lib/hand_over.lua
--#include lib/clear_grant.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local keep_ms, pub, fresh = tonumber(ARGV[4]), ARGV[5], ARGV[6] == '1'
local k, counter, q = KEYS[1], KEYS[2], KEYS[3]
local f = record_cancel(k, owner, req, seq, keep_ms)
if not f then return 1 end
unqueue(q, req)
clear_grant(k, req)
if undo_acquire(k, owner, req, seq, keep_ms, fresh, f) == 0 then
  hand_over(k, counter, q, keep_ms, pub, 'q' .. req)
end
return 1
