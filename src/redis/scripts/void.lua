-- Cancel an acquire whose reply was lost.
--
-- Undo acquire seq if it ran, and record it cancelled so that a late copy is refused (README.md, RESENDS).
-- The requester's claim as a waiter goes too (lib/withdraw.lua).
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: whose acquire it was
-- ARGV[2] req: the requester
-- ARGV[3] seq: the acquire's request id
-- ARGV[4] keep_ms: how long a freed lock keeps its record (ms)
-- ARGV[5] chan: where a freed lock is announced
-- ARGV[6] pub: PUBLISH or SPUBLISH
-- returns: 1
-- resend: finds "<seq>!" recorded: answers 1 and changes nothing (once
--   that record's TTL ran out, it records "<seq>!" again)
--#flags allow-oom
--#include lib/cancel.lua
--#include lib/announce.lua
--#include lib/withdraw.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local keep_ms, chan, pub = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local k = KEYS[1]
local f = record_cancel(k, owner, req, seq, keep_ms)
if not f then return 1 end
withdraw(k, req)
if undo_acquire(k, owner, req, seq, keep_ms, false, f) == 0 then
  announce(k, keep_ms, chan, pub, 'void')
end
return 1
