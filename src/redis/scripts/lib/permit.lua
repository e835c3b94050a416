--#include lib/now.lua
--#include lib/prune.lua
--#include lib/request.lua
--#include lib/reentry_lost.lua
--#include lib/drop_unknown.lua
--#include lib/leases.lua
--#include lib/holder.lua
--#include lib/shares.lua
--#include lib/shares_due.lua
-- acquire_permit(k, q, owner, req, seq, lease, expect, token, permits,
-- waits): take one permit of semaphore k (sem_acquire.lua has the
-- arguments and the reply). q: its queue of waiters, or nil when it is
-- not on this node (sem_acquire1: a slot mid-migration); then a waiter is
-- not registered (no release wakes it: it looks again within 1 s anyway,
-- its busy answer's TTL) nor taken out (a registration left behind
-- lapses within 3 s, and a release then wakes it for nothing). An
-- attempt that queues is recorded, q<requester> = "<seq>w", and so is a
-- wait's last try that finds no permit ("<seq>!"): a late copy of either,
-- or of an earlier attempt of the wait, is stale (README.md, RESENDS), so
-- it never queues again nor takes a permit; a resend of the attempt that
-- queued last is told busy again, and changes nothing.
local function acquire_permit(k, q, owner, req, seq, lease, expect, token, permits, waits)
  local of, qf = 'o' .. owner, 'q' .. req
  local hf = holder_field(owner, req)    -- (lib/holder.lua)
  local f, mine, _, answer = read_request(k, of, qf, seq, 'l', 'D')
  local shares_end = f[6]
  if shares_due(k, shares_end) then        -- (lib/shares_due.lua)
    f, mine, _, answer = read_request(k, of, qf, seq, 'l', 'D')
    shares_end = f[6]
  end
  local n, record, size = tonumber(f[1] or '0'), f[3], f[5]
  local again = record == seq .. 'w'    -- a resend of the attempt that queued
  if answer and not again then return answer end
  local now = now_ms()
  local first
  n, mine, first = prune_leases(k, of, n, mine, now)
  -- (a reentry whose permit ran out or went: never a new permit in its place)
  if reentry_lost(k, hf, expect, token, mine, 0) then return {-1} end
  n = drop_unknown(k, owner, req, expect, mine, n)
  if n > 0 and size and size ~= permits then
    return redis.error_reply(string.format('semaphore: Redis keeps %s ' ..
      'permits for this name while it is held, this client names %s', size, permits))
  end
  if n >= tonumber(permits) or again then
    if q and waits == '1' and not again then  -- (a resend: queued by its first run)
      redis.call('zadd', q, now + 3000, req)
      redis.call('pexpire', q, 6000)
      redis.call('hset', k, qf, seq .. 'w', 'k' .. req, now + 2 * lease)
    elseif waits ~= '1' and not again then    -- a release wakes the next instead
      if q then redis.call('zrem', q, req) end
      if record then                    -- the last try of a wait that queued
        redis.call('hset', k, qf, seq .. '!', 'k' .. req, now + 2 * lease)
      end
    end
    if shares_end and (not first or tonumber(shares_end) < first) then
      first = tonumber(shares_end)
    end
    return {0, math.min(first and math.max(first - now, 1) or 1000, 1000)}
  end
  prune(k, now, qf)
  mine = redis.call('hincrby', k, of, 1)
  if hf then
    redis.call('hincrby', k, hf, 1)
    share_until(k, hf, now + lease)
  end
  local e = own_lease(k, owner, mine, now + lease)
  redis.call('hset', k, 'n', n + 1, qf, seq, 't', '0', 'l', permits,
             'e' .. owner, e, 'k' .. req, now + 2 * lease)
  if q then redis.call('zrem', q, req) end
  if n <= 0 or redis.call('pttl', k) < lease then
    redis.call('pexpire', k, lease)
  end
  return {1, mine, 0}
end
