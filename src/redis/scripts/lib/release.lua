--#include lib/now.lua
--#include lib/holder.lua
--#include lib/take_out.lua
--#include lib/reserve.lua
--#include lib/shares_due.lua
-- release(k, owner, req, seq, token, keep_ms): take one hold of owner out
-- of lock k, as request seq of requester req, if its tenancy is token's.
-- Returns the reply (the holds of owner left | -1 lost), and, if a
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
    local shares_end = f[8]
    if shares_due(k, shares_end) then return release(k, owner, req, seq, token, keep_ms) end
  else f = redis.call('hmget', k, of, qf, 'n', 't', 'b', 'v') end
  local mine, record = tonumber(f[1] or '0'), f[2]
  local last = tonumber((record or '0'):match('^%d+'))
  if last >= tonumber(seq) then return mine end
  local n, t, busy, longest = tonumber(f[3] or '1'), f[4], f[5], f[6]
  -- (a shared owner's holds of other clients are theirs, not this one's)
  local hmine = hf and tonumber(f[7] or '0')
  if mine == 0 or t ~= token or hmine == 0 then return -1 end
  local now = (busy or longest) and now_ms()
  local left
  if n <= 1 and longest then
    left = take_out(k, of, mine, hf, hmine, 1, n, qf, seq, 'k' .. req, keep_ms .. 'e99',
                    reservation(longest, req, now))
  else
    left = take_out(k, of, mine, hf, hmine, 1, n, qf, seq, 'k' .. req, keep_ms .. 'e99')
  end
  return mine - 1, left, busy and tonumber(busy) > now
end
