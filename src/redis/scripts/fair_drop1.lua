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
