-- Take one hold of a fair lock, or queue for it.
--
-- README.md, THE FAIR LOCK. A free lock goes to the first live waiter, which may be the
-- caller; a busy one registers the caller in the queue (if it waits),
-- with this attempt's secret. A fresh acquire by the requester a grant
-- went to (g) adopts it: answered granted, nothing added.
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] counter: the fencing counter of its slot
-- KEYS[3] queue: its waiters, P{name}:q
-- ARGV[1] owner: as acquire's
-- ARGV[2] req: as acquire's
-- ARGV[3] seq: as acquire's
-- ARGV[4] lease_ms: as acquire's
-- ARGV[5] expect: as acquire's
-- ARGV[6] token: as acquire's; in a fresh acquire, the token of a hold
--   its client lost and drops (0: none): no grant of that tenancy to adopt
-- ARGV[7] waits: '1': queue if busy
-- ARGV[8] pub: PUBLISH or SPUBLISH, for a grant to the first waiter
-- ARGV[9] secret: 16 hex digits, new per attempt: a grant to this
--   attempt carries it (README.md, THE SECRET); absent: an older client's
-- ARGV[10] form: as acquire's
-- returns: as acquire's; busy: {0, the time to come back}, at most
--   BACK_MS for a registered waiter
-- resend: as acquire's; a copy of a busy attempt registers the same
--   seq and secret again (README.md, THE SECRET)
-- The fast path: a fresh hold of a free lock with nobody queued, by an
-- owner of one client (a coroutine's), before any helper is made and
-- parsing no number: what the take of a free lock below does there. It
-- takes every other case: a queue, a resend, a reentry, a busy lock, a
-- grant to adopt, shares, a new requester on a lock with a past tenancy
-- (which prunes). As acquire.lua's fast path compares request ids.
-- Where the server is Redis 7 or later it writes the short form (README.md,
-- THE SHORT FORM) where there is no key or the owner's own last record;
-- told the lock is a hash (form), it looks there first, as acquire.lua's.
do
  local k, owner, seq = KEYS[1], ARGV[1], ARGV[3]
  if ARGV[5] == '0' and ARGV[2] == owner and ARGV[10] ~= 'h' and seq:byte(1) ~= 48 and
     (redis.REDIS_VERSION_NUM or 0) >= 458752 then
    local v = redis.pcall('get', k)
    local n, t, q, kv, o
    if type(v) == 'string' then
      n, t, q, kv, o = v:match('^(%d+)|(%d+)|(%d+)|([%de]*)|g?|(.+)$')
    end
    if (v == false or (o == owner and n == '0' and (#q < #seq or (#q == #seq and q < seq)))) and
       (redis.call('hget', KEYS[3], 'H') or '') == '' then
      local c = redis.call('incr', KEYS[2])
      local ct = string.format('%d', c)
      if c <= 0 or (t and (#ct < #t or (#ct == #t and ct <= t))) then
        c = (t and tonumber(t) or 0) + 1      -- the counter was behind (lib/mint.lua)
        ct = string.format('%d', c)
        redis.call('set', KEYS[2], ct)
      end
      redis.call('set', k, '1|' .. ct .. '|' .. seq .. '|' .. (kv or '') .. '|g|' .. owner,
                 'px', ARGV[4])
      return c
    end
  end
  if ARGV[5] == '0' and ARGV[2] == owner and seq:byte(1) ~= 48 then
    local qf = 'q' .. owner
    local f = redis.pcall('hmget', k, 'n', 'o' .. owner, qf, 't', 'D')
    local n, record, t = f[1], f[3], f[4]
    local last = record and record:byte(-1)
    if not f.err and (not n or n == '0') and not f[2] and not f[5] and
       (record and last >= 48 and last <= 57 and
        (#record < #seq or (#record == #seq and record < seq)) or (not record and not t)) and
       (redis.call('hget', KEYS[3], 'H') or '') == '' then
      local c = redis.call('incr', KEYS[2])
      local ct = string.format('%d', c)
      if c <= 0 or (t and (#ct < #t or (#ct == #t and ct <= t))) then
        c = (t and tonumber(t) or 0) + 1      -- the counter was behind (lib/mint.lua)
        ct = string.format('%d', c)
        redis.call('set', KEYS[2], ct)
      end
      if not t and (redis.REDIS_VERSION_NUM or 0) >= 458752 and   -- no key: the short form
         redis.call('set', k, '1|' .. ct .. '|' .. seq .. '||g|' .. owner, 'nx', 'px', ARGV[4]) then
        return c
      end
      redis.call('hset', k, 'n', '1', 'o' .. owner, '1', qf, seq, 't', ct, 'g', owner)
      redis.call('pexpire', k, ARGV[4])
      return {1, 1, c}
    end
  end
end
--#include lib/now.lua
--#include lib/prune.lua
--#include lib/mint.lua
--#include lib/request.lua
--#include lib/reentry_lost.lua
--#include lib/drop_unknown.lua
--#include lib/raise_ttl.lua
--#include lib/unqueue.lua
--#include lib/pass_on.lua
--#include lib/holder.lua
--#include lib/shares.lua
--#include lib/shares_due.lua
--#include lib/fair_join.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local waits, pub, secret = ARGV[7], ARGV[8], ARGV[9] or ''
local k, counter, q = KEYS[1], KEYS[2], KEYS[3]

-- A waiter registers for REG_MS and renews that each time it looks
-- again, within BACK_MS (+ 1 s): one that stops is dropped at the head.
local REG_MS, BACK_MS = 3000, 1000

-- register(r, seq, ms, now, secret): put requester r at the end of the
-- queue (if not in it), registered for attempt seq asking a lease of ms,
-- with that attempt's secret.
local function register(r, r_seq, ms, now, r_secret)
  if redis.call('hexists', q, 'n' .. r) == 0 then
    local t = redis.call('hget', q, 'T') or ''
    redis.call('hset', q, t == '' and 'H' or 'n' .. t, r)
    redis.call('hset', q, 'T', r, 'p' .. r, t, 'n' .. r, '')
    redis.call('hincrby', q, 'c', 1)
  end
  redis.call('hset', q, 'r' .. r, string.format('%d:%s:%s',
             now + REG_MS, r_seq, ms), 's' .. r, r_secret)
  redis.call('pexpire', q, 2 * REG_MS)
end

local of, qf = 'o' .. owner, 'q' .. req
local hf = holder_field(owner, req)    -- (lib/holder.lua)
local f, mine, t, answer = read_request(k, of, qf, seq, 'g', hf or 'g', 'D')
local shares_end = f[7]
if shares_due(k, shares_end) then          -- (lib/shares.lua)
  f, mine, t, answer = read_request(k, of, qf, seq, 'g', hf or 'g', 'D')
  shares_end = f[7]
end
if answer then return answer end
local now = now_ms()
if reentry_lost(k, hf, expect, token, mine, t) then return {-1} end
local n, grant, own = tonumber(f[1] or '0'), f[5], f[6]
-- (not a tenancy this client holds and knows it lost: its DROP takes
-- that hold out, so a fresh acquire joins it instead, token; and a
-- shared owner's only where the grant gave this requester a hold)
if mine > 0 and expect == 0 and grant == req and t ~= tonumber(token) and
   (not hf or own) then                              -- adopt the grant
  redis.call('hset', k, qf, seq, 'k' .. req, now + 2 * lease)
  if hf then share_until(k, hf, now + lease) end
  raise_ttl(k, lease)
  unqueue(q, req)
  return {1, mine, t}
end
n, mine = drop_unknown(k, owner, req, expect, mine, n)
if n <= 0 then
  local r = pass_on(k, counter, q, req, pub, qf, now)
  if r and r ~= 'me' then n = 1 end
end
if n <= 0 then
  if f[4] and not f[3] then prune(k, now, qf) end  -- only a new requester adds fields
  local c = mint(counter, t)
  redis.call('hset', k, 'n', 1, of, 1, qf, seq, 't',
             string.format('%d', c), 'g', req)
  if hf then
    redis.call('hset', k, hf, 1)
    share_until(k, hf, now + lease)
  end
  redis.call('pexpire', k, lease)
  return {1, 1, c}
end
if mine == 0 then
  local p = redis.call('pttl', k)
  if shares_end then p = math.max(math.min(p, tonumber(shares_end) - now), 1) end
  if waits == '1' then
    register(req, seq, lease, now, secret)
    p = math.min(p, BACK_MS)
  end
  return {0, p}
end
mine = fair_join(k, of, hf, qf, req, seq, n, lease, now, grant)
unqueue(q, req)
return {1, mine, t}
