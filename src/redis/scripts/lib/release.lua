--#include lib/now.lua
--#include lib/take_out.lua
--#include lib/reserve.lua
--#include lib/shares_due.lua
-- release(k, owner, req, seq, token, keep_ms): take one hold of owner out
-- of lock k, as request seq of requester req, if its tenancy is token's.
-- Returns the reply ({1, holds of owner left} | {-1} lost), and, if a
-- hold was taken out, the holds left in all (0: the lock is free) and
-- whether someone may wait for it. A release that frees the lock
-- reserves it for a starving waiter (lib/waiter.lua). Its record's k is
-- "<keep_ms>e99", stamped by the first prune that meets it (lib/prune.lua):
-- the server's clock (TIME) is read only when b or v needs it (or D:
-- a shared owner's shares may be over first, lib/shares.lua).
local function release(k, owner, req, seq, token, keep_ms)
  local of, qf, hf = 'o' .. owner, 'q' .. req, holder_field(owner, req)
  local f
  if hf then
    f = redis.call('hmget', k, of, qf, 'n', 't', 'b', 'v', hf, 'D')
    if shares_due(k, f[8]) then return release(k, owner, req, seq, token, keep_ms) end
  else f = redis.call('hmget', k, of, qf, 'n', 't', 'b', 'v') end
  local mine = tonumber(f[1] or '0')
  local last = tonumber((f[2] or '0'):match('^%d+'))
  if last >= tonumber(seq) then return {1, mine} end
  -- (a shared owner's holds of other clients are theirs, not this one's)
  local hmine = hf and tonumber(f[7] or '0')
  if mine == 0 or f[4] ~= token or hmine == 0 then return {-1} end
  local now, n = (f[5] or f[6]) and now_ms(), tonumber(f[3] or '1')
  local left
  if n <= 1 and f[6] then
    left = take_out(k, of, mine, hf, hmine, 1, n, qf, seq, 'k' .. req, keep_ms .. 'e99',
                    reservation(f[6], req, now))
  else
    left = take_out(k, of, mine, hf, hmine, 1, n, qf, seq, 'k' .. req, keep_ms .. 'e99')
  end
  return {1, mine - 1}, left, f[5] and tonumber(f[5]) > now
end
