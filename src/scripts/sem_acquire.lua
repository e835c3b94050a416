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
--#include lib/now.lua
--#include lib/prune.lua
--#include lib/request.lua
--#include lib/reentry_lost.lua
--#include lib/drop_unknown.lua
--#include lib/leases.lua
--#include lib/holder.lua
--#include lib/shares.lua
--#include lib/shares_due.lua
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local permits, waits = ARGV[7], ARGV[8]
local k, q = KEYS[1], KEYS[2]
local of, qf = 'o' .. owner, 'q' .. req
local hf = holder_field(owner, req)    -- (lib/holder.lua)
local f, mine, _, answer = read_request(k, of, qf, seq, 'l', 'D')
if shares_due(k, f[6]) then                -- (lib/shares_due.lua)
  f, mine, _, answer = read_request(k, of, qf, seq, 'l', 'D')
end
if answer then return answer end
local now = now_ms()
local n, first
n, mine, first = prune_leases(k, of, tonumber(f[1] or '0'), mine, now)
-- (a reentry whose permit ran out or went: never a new permit in its place)
if reentry_lost(k, hf, expect, token, mine, 0) then return {-1} end
n = drop_unknown(k, owner, req, expect, mine, n)
if n > 0 and f[5] and f[5] ~= permits then
  return redis.error_reply(string.format('semaphore: Redis keeps %s ' ..
    'permits for this name while it is held, this client names %s', f[5], permits))
end
if n >= tonumber(permits) then
  if waits == '1' then
    redis.call('zadd', q, now + 3000, req)
    redis.call('pexpire', q, 6000)
  else                                  -- a release wakes the next instead
    redis.call('zrem', q, req)
  end
  if f[6] and (not first or tonumber(f[6]) < first) then first = tonumber(f[6]) end
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
redis.call('zrem', q, req)
if n <= 0 or redis.call('pttl', k) < lease then
  redis.call('pexpire', k, lease)
end
return {1, mine, 0}
