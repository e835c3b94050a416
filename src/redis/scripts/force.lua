-- Free a lock whoever holds it (force_release).
--
-- A request of its own: a resend answers as the first run did.
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] req: the requester
-- ARGV[2] seq: the request id
-- ARGV[3] keep_ms: how long the freed lock keeps its record (ms)
-- ARGV[4] chan: where a freed lock is announced
-- ARGV[5] pub: PUBLISH or SPUBLISH
-- ARGV[6] notice: the channel on which every client of this prefix hears
--   of forced releases (plain PUBLISH: Cluster sends it to every node),
--   so that a holder's watchdog checks its holds at once
-- returns: 1 it was held | 0 it was free
-- resend: finds "<seq>:1" or "<seq>:0" recorded and answers as the
--   first run did, changing nothing; once that record's TTL ran out
--   (keep_ms), a copy frees the lock again if it is held
--#flags allow-oom
--#include lib/now.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local req, seq, keep_ms, chan, pub = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local notice = ARGV[6]
local k, qf = KEYS[1], 'q' .. req
local now = now_ms()
local f = redis.call('hmget', k, qf, 'n')
local record, held = f[1], tonumber(f[2] or '0') > 0
if record == seq .. ':1' then return 1 end
if record == seq .. ':0' then return 0 end
if held then
  for _, x in ipairs(redis.call('hkeys', k)) do
    local c = x:sub(1, 1)             -- every owner's holds, and each
    if c == 'o' or c == 'h' then        -- requester's (lib/holder.lua)
      redis.call('hdel', k, x)
    end
  end
  redis.call('hset', k, 'n', 0)
  redis.call(pub, chan, 'force')
  redis.call('publish', notice, k)
end
redis.call('hset', k, qf, seq .. (held and ':1' or ':0'),
           'k' .. req, now + 2 * keep_ms)
redis.call('pexpire', k, keep_ms)
return held and 1 or 0
