-- Take an owner's holds out of a fair lock, passing nothing on: while its slot migrates.
--
-- For a drop while its slot is mid-migration (TRYAGAIN), as
-- fair_release1 is for a release: as fair_drop does, and a freed lock
-- keeps its record, free, for the first waiter's next look.
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: as drop's
-- ARGV[2] count: as drop's
-- ARGV[3] token: as drop's
-- ARGV[4] keep_ms: as drop's
-- ARGV[5] req: as drop's
-- ARGV[6] after: as drop's
-- returns: as drop's
-- resend: as drop's
--#flags allow-oom
-- The fast path: a lock in its short form (README.md, THE SHORT FORM),
-- which stays in that form, as the rest does it on the hash: the rest
-- would make the hash first, which a slot mid-migration refuses
-- (lib/short.lua).
do
  local k, owner, token, after = KEYS[1], ARGV[1], ARGV[3], ARGV[6]
  local v = ARGV[5] == owner and redis.pcall('get', k)
  local n, t, q, kv, o
  if type(v) == 'string' then
    n, t, q, kv, o = v:match('^(%d+)|(%d+)|(%d+)|([%de]*)|g?|(.+)$')  -- (g: none left to adopt)
  end
  if o then
    if o ~= owner or n == '0' or (token ~= '0' and t ~= token) or
       (after ~= '0' and (#q > #after or (#q == #after and q > after))) then
      return 0
    end
    local left = math.max(tonumber(n) - tonumber(ARGV[2]), 0)
    local v2 = string.format('%d', left) .. '|' .. t .. '|' .. q .. '|' .. kv .. '||' .. owner
    local w = left == 0 and redis.pcall('set', k, v2, 'px', ARGV[4])   -- (a pcall: as
              or redis.pcall('set', k, v2, 'keepttl')                    -- fair_release's)
    if not w.err then return 1 end
  end
end
--#include lib/drop.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, count, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local keep_ms, req = tonumber(ARGV[4]), ARGV[5]
local k = KEYS[1]
local left = drop_holds(k, owner, req, count, token, ARGV[6])
if not left then return 0 end
if redis.call('hget', k, 'g') == req then        -- none of it to adopt
  redis.call('hdel', k, 'g')
end
if left == 0 then                       -- as hand_over with nobody waiting
  redis.call('hdel', k, 'g')
  redis.call('pexpire', k, keep_ms)
end
return 1
