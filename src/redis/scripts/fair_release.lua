-- Release one hold of a fair lock; pass a freed one on.
--
-- As release does; a freed lock goes to the first live waiter
-- (README.md, THE FAIR LOCK).
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] counter: the fencing counter of its slot (a grant's token)
-- KEYS[3] queue: its waiters, P{name}:q
-- ARGV[1] owner: as release's
-- ARGV[2] req: as release's
-- ARGV[3] seq: as release's
-- ARGV[4] token: as release's
-- ARGV[5] keep_ms: as release's
-- ARGV[6] pub: PUBLISH or SPUBLISH, for the grant (a fair lock wakes its
--   next holder only, on that one's channel: it takes no channel)
-- ARGV[7] count: as release's (only its 0 counts: the client last saw
--   the lock as its hash, so the short form is not looked for first)
-- returns: as release's
-- resend: as release's: answered from the record, nothing passed on
--   again
--#flags allow-oom
-- The fast path: the last hold of a lock with nobody queued and nobody
-- waiting, released by an owner of one client (a coroutine's), before any
-- helper is made and parsing no number: what release (lib/release.lua)
-- and hand_over (lib/hand_over.lua) do there. It takes every other case,
-- as release.lua's fast path does, and a queue (a grant to pass on).
-- In the short form (README.md, THE SHORT FORM) it takes the owner's one
-- hold, its record kept in that form.
do
  local k, owner, seq = KEYS[1], ARGV[1], ARGV[3]
  if ARGV[2] == owner and ARGV[7] ~= '0' and seq:byte(1) ~= 48 and
     (redis.REDIS_VERSION_NUM or 0) >= 458752 then
    local v = redis.pcall('get', k)
    local t, q, o
    if type(v) == 'string' then t, q, o = v:match('^1|(%d+)|(%d+)|[%de]*|g?|(.+)$') end
    if o == owner and t == ARGV[4] and (#q < #seq or (#q == #seq and q < seq)) and
       (redis.call('hget', KEYS[3], 'H') or '') == '' then
      -- (a pcall: out of memory, EVALSHA refuses a script's first write
      -- that may grow the data; the rest then deletes first)
      if not redis.pcall('set', k, '0|' .. t .. '|' .. seq .. '|' .. ARGV[5] .. 'e99||' .. owner,
                         'px', ARGV[5]).err then
        return 0
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
                       (#record < #seq or (#record == #seq and record < seq)))) and
       (redis.call('hget', KEYS[3], 'H') or '') == '' then
      redis.call('hdel', k, of, 'g')
      redis.call('hset', k, 'n', '0', qf, seq, 'k' .. owner, ARGV[5] .. 'e99')
      redis.call('pexpire', k, ARGV[5])
      return 0
    end
  end
end
--#include lib/release.lua
--#include lib/hand_over.lua
--#include lib/clear_grant.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_ms, pub = tonumber(ARGV[5]), ARGV[6]
local k, counter, q = KEYS[1], KEYS[2], KEYS[3]
local reply, left = release(k, owner, req, seq, token, keep_ms)
if left == 0 then hand_over(k, counter, q, keep_ms, pub, 'q' .. req)  -- (g: cleared)
elseif left then clear_grant(k, req) end
return reply
