--#include lib/now.lua
--#include lib/prune.lua
--#include lib/requester.lua
--#include lib/mint.lua
--#include lib/unqueue.lua
--#include lib/holder.lua
--#include lib/shares.lua
-- A freed fair lock goes to its first live waiter (README.md, THE FAIR
-- LOCK), inside the script that frees it.

-- How long a grant lasts before its new holder's client renews it (the
-- client counts on it too: acquire.c).
local GRANT_MS = 3000 --#export DL_FAIR_GRANT_MS

-- head(q, now): the first live waiter of queue q: its requester, its
-- registration's seq, lease (ms) and secret ('' if none), and now (the
-- server's clock, read here if now is nil: an empty queue needs none);
-- nil when none. Waiters whose registration lapsed are dropped on the
-- way; a queue that is no list is dropped whole (and the waiters register
-- again).
local function head(q, now)
  for _ = 1, 10000 do
    local r = redis.call('hget', q, 'H') or ''
    if r == '' then return nil end
    now = now or now_ms()
    local reg = redis.call('hmget', q, 'r' .. r, 's' .. r)
    local registration, secret = reg[1], reg[2]
    local u, seq, ms = (registration or ''):match('^(%d+):(%d+):(%d+)$')
    if u and tonumber(u) > now then return r, seq, ms, secret or '', now end
    if redis.call('hexists', q, 'n' .. r) == 0 then
      redis.call('del', q)
      return nil
    end
    unqueue(q, r)
  end
end

-- pass_on(k, counter, q, me, pub, keep, now): lock k is free: grant it to the
-- first live waiter in q, unless that is requester me (who takes it
-- itself), with a new token from counter, and publish the grant with pub
-- on that waiter's client's channel, as "seq:secret:token". A waiter whose
-- registration is older than its last request that took effect is stale
-- (that request ended its wait): dropped. Returns the requester granted,
-- 'me', or nil when nobody waits. The new tenancy prunes old request
-- records, but field keep (the caller's). now: the server's clock, if
-- the caller read it (else read here, once a waiter is found).
local function pass_on(k, counter, q, me, pub, keep, now)
  local r, seq, ms, secret
  repeat
    r, seq, ms, secret, now = head(q, now)
    if not r then return nil end
    unqueue(q, r)
    if r == me then return 'me' end
    local done = (redis.call('hget', k, 'q' .. r) or '0'):match('^%d+')
  until tonumber(done) < tonumber(seq)
  local t = tonumber(redis.call('hget', k, 't') or '0')
  local c = mint(counter, t)
  prune(k, now, keep)
  local tok = string.format('%d', c)
  local owner = owner_of(r)
  redis.call('hset', k, 'n', 1, 'o' .. owner, 1,
             'q' .. r, seq, 'k' .. r, now + 2 * tonumber(ms), 't', tok, 'g', r)
  local hf = holder_field(owner, r)     -- (lib/holder.lua)
  if hf then
    redis.call('hset', k, hf, 1)
    share_until(k, hf, now + math.min(tonumber(ms), GRANT_MS))
  end
  redis.call('pexpire', k, math.min(tonumber(ms), GRANT_MS))
  if secret ~= '' then secret = secret .. ':' end
  redis.call(pub, k .. ':ch:' .. r:match('^[^|:]*'), seq .. ':' .. secret .. tok)
  return r
end
