-- Take a client's holds of an owner out.
--
-- The client gave them up as lost, or a process ended. Of an owner
-- shared with other clients, only this client's holds (the requester's).
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: whose holds
-- ARGV[2] count: how many (at most all the owner has)
-- ARGV[3] token: only in this tenancy; '0': in any
-- ARGV[4] keep_ms: how long a freed lock keeps its record (ms)
-- ARGV[5] chan: where a freed lock is announced
-- ARGV[6] pub: PUBLISH or SPUBLISH
-- ARGV[7] req: the requester whose holds they are
-- ARGV[8] after: the last request id its client sent before it gave
--   them up: none later may have run ('0': no check; lib/drop.lua)
-- returns: 1 dropped | 0 the requester holds nothing there
-- resend: a DROP has no request id: a copy takes out up to count holds
--   of those the requester still has there (its client drops all it
--   had, so a copy finds none: 0, nothing changed), and none once a
--   request of the requester later than after ran
--#flags allow-oom
-- The fast path: a lock in its short form (README.md, THE SHORT FORM),
-- which stays in that form, as the rest does it on the hash: the rest
-- would make the hash first, which a slot mid-migration refuses
-- (lib/short.lua).
do
  local k, owner, token, after = KEYS[1], ARGV[1], ARGV[3], ARGV[8]
  local v = ARGV[7] == owner and redis.pcall('get', k)
  local n, t, q, kv, g, o
  if type(v) == 'string' then
    n, t, q, kv, g, o = v:match('^(%d+)|(%d+)|(%d+)|([%de]*)|(g?)|(.+)$')
  end
  if o then
    if o ~= owner or n == '0' or (token ~= '0' and t ~= token) or
       (after ~= '0' and (#q > #after or (#q == #after and q > after))) then
      return 0
    end
    local left = math.max(tonumber(n) - tonumber(ARGV[2]), 0)
    local v2 = string.format('%d', left) .. '|' .. t .. '|' .. q .. '|' .. kv .. '|' .. g ..
               '|' .. owner
    local w = left == 0 and redis.pcall('set', k, v2, 'px', ARGV[4])   -- (a pcall: as
              or redis.pcall('set', k, v2, 'keepttl')                    -- fair_release's)
    if not w.err then
      if left == 0 then redis.call(ARGV[6], ARGV[5], 'drop') end
      return 1
    end
  end
end
--#include lib/drop.lua
--#include lib/announce.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, count, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local keep_ms, chan, pub, req = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
local k = KEYS[1]
local left = drop_holds(k, owner, req, count, token, ARGV[8])
if not left then return 0 end
if left == 0 then announce(k, keep_ms, chan, pub, 'drop') end
return 1
