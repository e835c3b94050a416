-- Cancel an acquire of a fair lock, passing nothing on: while its slot migrates.
--
-- For a cancel while its slot is mid-migration (TRYAGAIN), as
-- fair_release1 is for a release: as fair_void does, leaving the queue
-- only if it is here (lib/here.lua; a registration left in it is stale,
-- "<seq>!" recorded, and is dropped when it reaches the head), and a
-- freed lock (or a grant taken back) keeps its record, free, for the
-- first waiter's next look.
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: as void's
-- ARGV[2] req: as void's
-- ARGV[3] seq: as void's
-- ARGV[4] keep_ms: as void's
-- ARGV[5] fresh: as fair_void's
-- returns: 1
-- resend: as void's
--#flags allow-oom
--#include lib/cancel.lua
--#include lib/unqueue.lua
--#include lib/clear_grant.lua
--#include lib/here.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local keep_ms, fresh = tonumber(ARGV[4]), ARGV[5] == '1'
local k = KEYS[1]
local f = record_cancel(k, owner, req, seq, keep_ms)
if not f then return 1 end
local q = here(k .. ':q')
if q then unqueue(q, req) end
clear_grant(k, req)
if undo_acquire(k, owner, req, seq, keep_ms, fresh, f) == 0 then
  redis.call('hdel', k, 'g')
  redis.call('pexpire', k, keep_ms)
end
return 1
