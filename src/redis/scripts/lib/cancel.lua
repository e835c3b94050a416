--#include lib/now.lua
--#include lib/holder.lua
--#include lib/take_out.lua
--#include lib/prune.lua
-- Cancel acquire seq (VOID): undo it if it ran, refuse it if it comes
-- late (README.md, RESENDS). In two steps, a fair lock's cancel leaving
-- the queue between them.
--
-- record_cancel(k, owner, req, seq, keep_ms): record "<seq>!" for
-- requester req in lock k (a requester without a record adds fields:
-- it prunes first, as a new requester's take does). Returns f (the lock's fields of, qf, n, g,
-- and the requester's own holds, or n again: lib/holder.lua), or
-- nil when the cancel is stale (a later request, or this cancel, ran).
local function record_cancel(k, owner, req, seq, keep_ms)
  local qf = 'q' .. req
  local f = redis.call('hmget', k, 'o' .. owner, qf, 'n', 'g',
                       holder_field(owner, req) or 'n')
  local record = f[2]
  local last = tonumber((record or '0'):match('^%d+'))
  local now = now_ms()
  if record == seq .. '!' or last > tonumber(seq) then
    return nil
  end
  if not record then prune(k, now, qf) end
  redis.call('hset', k, qf, seq .. '!', 'k' .. req, now + 2 * keep_ms)
  return f
end

-- undo_acquire(k, owner, req, seq, keep_ms, fresh, f): take out the hold
-- acquire seq took, if it ran (f: record_cancel's). A fair lock's cancel
-- of a fresh attempt (fresh: its client knew of no hold) also takes back
-- a grant made to the requester under an earlier seq that its client
-- never saw (g = the requester): that attempt may never have reached
-- Redis. After the client takes a grant from its message, its next
-- attempt is a reentry, never fresh. Returns the holds left in all if a
-- hold was taken out (0: free), else nil.
local function undo_acquire(k, owner, req, seq, keep_ms, fresh, f)
  local mine, record, n, grant = tonumber(f[1] or '0'), f[2], f[3], f[4]
  local hf = holder_field(owner, req)
  local hmine = hf and tonumber(f[5] or '0')
  if (record == seq or (fresh and grant == req)) and mine > 0 and hmine ~= 0 then
    return take_out(k, 'o' .. owner, mine, hf, hmine, 1, tonumber(n or '1'))
  elseif redis.call('pttl', k) == -1 then
    redis.call('pexpire', k, keep_ms)
  end
  return nil
end
