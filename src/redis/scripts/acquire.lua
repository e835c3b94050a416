-- Take one hold of an exclusive lock.
--
-- A new tenancy with a new fencing token, or one more hold of the
-- caller's (README.md: DATA, RESENDS).
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] counter: the fencing counter of its slot, P{tag}:fence
-- ARGV[1] owner: whose hold it is
-- ARGV[2] req: the requester, "<client id>|<owner>" or the owner
-- ARGV[3] seq: the request id (new per attempt, the same in a resend)
-- ARGV[4] lease_ms: the lease (ms)
-- ARGV[5] expect: the count of the hold a reentry joins; 0: a fresh hold
-- ARGV[6] token: the token of the hold a reentry joins
-- ARGV[7] waited: how long (ms) the caller has waited so far; -1: it
--   will not wait (lib/waiter.lua)
-- ARGV[8] form: 'h' where its client last saw the lock as its hash: the
--   fast path looks for that first (else, or absent, for the short form)
-- returns: token, a hold of count 1 in the short form (an integer: no
--   table to reply with) | {1, count, token} (at count 1: a hold in the
--   hash, so its client knows which form to look for first) | {0,
--   wait_ms} busy (the holder's TTL, or
--   a reservation's for another waiter) | {-1} lost (the hold
--   the client believes in is gone, or another tenancy's) | {-2}
--   cancelled or stale
-- resend: finds its seq recorded once it took a hold: answers {1, count,
--   token} again ({-1} if that hold is gone since) and changes nothing;
--   a later request's record makes it {-2}; a busy run leaves no record
--   of its seq, so a copy of it tries again
-- The fast path: a fresh hold of a free lock by an owner of one client
-- (a coroutine's), before any helper is made and parsing no number:
-- what acquire_exclusive (lib/exclusive.lua) does there. It takes every
-- other case: a resend, a reentry, a busy lock, a waiter's claim or a
-- reservation, shares, a new requester on a lock with a past tenancy
-- (which prunes). Request ids and tokens are decimal integers, so one
-- that is shorter, or as long and sorts before, is smaller.
-- In the short form (README.md, THE SHORT FORM, written only where the
-- server is Redis 7 or later) it takes a fresh hold where there is no
-- key or the owner's own last record, and a reentry of the owner's hold;
-- told the lock is a hash (form), it looks there first, and makes the
-- short form where it finds no key.
do
  local k, owner, seq = KEYS[1], ARGV[1], ARGV[3]
  local fresh = ARGV[5] == '0'
  if ARGV[2] == owner and ARGV[8] ~= 'h' and seq:byte(1) ~= 48 then
    local v = redis.pcall('get', k)
    if v == false and fresh and (redis.REDIS_VERSION_NUM or 0) >= 458752 then
      local c = redis.call('incr', KEYS[2])
      if c <= 0 then
        c = 1                                 -- the counter was behind (lib/mint.lua)
        redis.call('set', KEYS[2], '1')
      end
      redis.call('set', k, '1|' .. string.format('%d', c) .. '|' .. seq .. '|||' .. owner,
                 'px', ARGV[4])
      return c
    elseif type(v) == 'string' then
      local n, t, q, kv, g, o = v:match('^(%d+)|(%d+)|(%d+)|([%de]*)|(g?)|(.+)$')
      if o == owner and (#q < #seq or (#q == #seq and q < seq)) then
        if fresh and n == '0' then
          local c = redis.call('incr', KEYS[2])
          local ct = string.format('%d', c)
          if c <= 0 or #ct < #t or (#ct == #t and ct <= t) then
            c = tonumber(t) + 1
            ct = string.format('%d', c)
            redis.call('set', KEYS[2], ct)
          end
          redis.call('set', k, '1|' .. ct .. '|' .. seq .. '|' .. kv .. '|' .. g .. '|' .. owner,
                     'px', ARGV[4])
          return c
        elseif not fresh and n ~= '0' and ARGV[5] == n and ARGV[6] == t then
          local m = tonumber(n) + 1
          redis.call('set', k, string.format('%d', m) .. '|' .. t .. '|' .. seq .. '|' .. kv ..
                     '|' .. g .. '|' .. owner, 'keepttl')
          redis.call('pexpire', k, ARGV[4], 'gt')
          return {1, m, tonumber(t)}
        end
      end
    end
  end
  if fresh and ARGV[2] == owner and seq:byte(1) ~= 48 then
    local qf = 'q' .. owner
    local f = redis.pcall('hmget', k, 'n', 'o' .. owner, qf, 't', 'v', 'r', 'D')
    local n, record, t = f[1], f[3], f[4]
    local last = record and record:byte(-1)
    if not f.err and (not n or n == '0') and not f[2] and not f[5] and not f[6] and not f[7] and
       (record and last >= 48 and last <= 57 and
        (#record < #seq or (#record == #seq and record < seq)) or (not record and not t)) then
      local c = redis.call('incr', KEYS[2])
      local ct = string.format('%d', c)
      if c <= 0 or (t and (#ct < #t or (#ct == #t and ct <= t))) then
        c = (t and tonumber(t) or 0) + 1      -- the counter was behind (lib/mint.lua)
        ct = string.format('%d', c)
        redis.call('set', KEYS[2], ct)
      end
      if not t and (redis.REDIS_VERSION_NUM or 0) >= 458752 and   -- no key: the short form
         redis.call('set', k, '1|' .. ct .. '|' .. seq .. '|||' .. owner, 'nx', 'px', ARGV[4]) then
        return c
      end
      redis.call('hset', k, 'n', '1', 'o' .. owner, '1', qf, seq, 't', ct)
      redis.call('pexpire', k, ARGV[4])
      return {1, 1, c}
    end
  end
end
--#include lib/exclusive.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = ARGV[4], tonumber(ARGV[5]), ARGV[6]
local waited = tonumber(ARGV[7])
return acquire_exclusive(KEYS[1], KEYS[2], owner, req, seq, lease, expect, token, waited)
