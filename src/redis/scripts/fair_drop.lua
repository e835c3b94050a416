-- Take an owner's holds out of a fair lock; pass a freed one on.
--
-- As drop does; a freed lock goes to the first live waiter.
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] counter: the fencing counter of its slot (a grant's token)
-- KEYS[3] queue: its waiters, P{name}:q
-- ARGV[1] owner: as drop's
-- ARGV[2] count: as drop's
-- ARGV[3] token: as drop's
-- ARGV[4] keep_ms: as drop's
-- ARGV[5] pub: PUBLISH or SPUBLISH, for a grant
-- ARGV[6] req: as drop's
-- ARGV[7] after: as drop's
-- returns: as drop's
-- resend: as drop's
--#flags allow-oom
--#include lib/drop.lua
--#include lib/hand_over.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, count, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local keep_ms, pub, req, after = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
local k, counter, q = KEYS[1], KEYS[2], KEYS[3]
local left = drop_holds(k, owner, req, count, token, after)
if not left then return 0 end
if redis.call('hget', k, 'g') == req then        -- none of it to adopt
  redis.call('hdel', k, 'g')
end
if left == 0 then hand_over(k, counter, q, keep_ms, pub, nil) end
return 1
