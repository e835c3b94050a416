-- Release one hold of an exclusive lock.
--
-- A freed lock keeps its record for a resend until its TTL runs out (the
-- lease of the hold released: its client resends no later), and tells
-- the waiters, while a busy acquire's wait may last (lib/waiter.lua).
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: whose hold it is
-- ARGV[2] req: the requester
-- ARGV[3] seq: the request id
-- ARGV[4] token: the hold's tenancy
-- ARGV[5] keep_ms: the hold's lease (ms): its record outlives prunes 2x that
-- ARGV[6] chan: where a freed lock is announced, P{name}:ch
-- ARGV[7] pub: PUBLISH or SPUBLISH (Cluster)
-- ARGV[8] count: the owner's holds as its client counted them before
--   this release (the short form's guess; absent: 1); 0: its client
--   last saw the lock as its hash (a read-write lock's always), so the
--   short form is not looked for first
-- returns: the owner's holds left (an integer, 0 and up) | -1 lost
-- resend: finds its seq recorded: answers the owner's holds now and
--   changes nothing (no second announcement); once the record's TTL
--   ran out, -1 lost
--#flags allow-oom
-- The fast path: the last hold of a lock nobody waits for, released by
-- an owner of one client (a coroutine's), before any helper is made and
-- parsing no number: what release (lib/release.lua) does there. It takes
-- every other case: a resend, a hold not the last, a waiter, a shared
-- owner. (Request ids are decimal integers: one that is shorter, or as
-- long and sorts before, is smaller.)
-- In the short form (README.md, THE SHORT FORM) it takes any hold of the
-- owner's, its record kept in that form, in one call where the lock is
-- as its client counted (SET GET: the value it had comes back, and goes
-- back if it was not that), where the server is Redis 7 or later, as
-- everywhere the short form is written.
do
  local k, owner, seq, c = KEYS[1], ARGV[1], ARGV[3], ARGV[8] or '1'
  if ARGV[2] == owner and c ~= '0' and seq:byte(1) ~= 48 and
     (redis.REDIS_VERSION_NUM or 0) >= 458752 then
    local m = c == '1' and '0' or string.format('%d', tonumber(c) - 1)
    local v = redis.pcall('set', k, m .. '|' .. ARGV[4] .. '|' .. seq .. '|' .. ARGV[5] ..
                          'e99||' .. owner, 'xx', 'keepttl', 'get')
    local n, t, q, g, o
    if type(v) == 'string' then
      n, t, q, g, o = v:match('^(%d+)|(%d+)|(%d+)|[%de]*|(g?)|(.+)$')
    end
    local mine = o == owner and n ~= '0' and t == ARGV[4] and
                 (#q < #seq or (#q == #seq and q < seq))
    if mine and n == c and g == '' then return c == '1' and 0 or tonumber(m) end
    if type(v) == 'string' then
      redis.call('set', k, v, 'keepttl')  -- not as counted: as it was
      if mine then                        -- then as it is
        local left = tonumber(n) - 1
        redis.call('set', k, string.format('%d', left) .. '|' .. t .. '|' .. seq .. '|' ..
                   ARGV[5] .. 'e99|' .. g .. '|' .. owner, 'keepttl')
        return left
      end
    end
  end
end
do
  local k, owner, seq = KEYS[1], ARGV[1], ARGV[3]
  if ARGV[2] == owner and seq:byte(1) ~= 48 then
    local of, qf = 'o' .. owner, 'q' .. owner
    local f = redis.pcall('hmget', k, of, qf, 'n', 't', 'b', 'v')
    local record = f[2]
    local last = record and record:byte(-1)
    if not f.err and f[1] == '1' and f[3] == '1' and f[4] == ARGV[4] and not f[5] and not f[6] and
       (not record or (last >= 48 and last <= 57 and
                       (#record < #seq or (#record == #seq and record < seq)))) then
      redis.call('hdel', k, of)
      redis.call('hset', k, 'n', '0', qf, seq, 'k' .. owner, ARGV[5] .. 'e99')
      return 0
    end
  end
end
--#include lib/release.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_ms, chan, pub = ARGV[5], ARGV[6], ARGV[7]
local k = KEYS[1]
local reply, left, waiters = release(k, owner, req, seq, token, keep_ms)
if left == 0 and waiters then redis.call(pub, chan, token) end
return reply
