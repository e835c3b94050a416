-- Release one hold of a fair lock, passing nothing on: while its slot migrates.
--
-- For a release while its slot is mid-migration (TRYAGAIN: the lock, its
-- counter and its queue are not all on this node; an empty queue counts
-- as missing). As fair_release does, but a freed lock is not passed on:
-- a grant needs the queue and a new token from the counter, not all here.
-- It keeps its record, free; the first waiter takes it when it next looks
-- (within BACK_MS + 1 s, fair_acquire.lua), once the three keys are on
-- one node again, as after a force_release. A resend answers from the
-- record, whichever form runs it.
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: as release's
-- ARGV[2] req: as release's
-- ARGV[3] seq: as release's
-- ARGV[4] token: as release's
-- ARGV[5] keep_ms: as release's
-- returns: as release's
-- resend: as release's
--#flags allow-oom
-- The fast path: a hold of a lock in its short form (README.md, THE SHORT
-- FORM), which stays in that form, as the rest does it on the hash: the
-- rest would make the hash first, which a slot mid-migration refuses
-- (lib/short.lua).
do
  local k, owner, seq = KEYS[1], ARGV[1], ARGV[3]
  if ARGV[2] == owner and seq:byte(1) ~= 48 then
    local v = redis.pcall('get', k)
    local n, t, q, o
    if type(v) == 'string' then n, t, q, o = v:match('^(%d+)|(%d+)|(%d+)|[%de]*|g?|(.+)$') end
    if o == owner and n ~= '0' and t == ARGV[4] and (#q < #seq or (#q == #seq and q < seq)) then
      local rest = '|' .. t .. '|' .. seq .. '|' .. ARGV[5] .. 'e99||' .. owner
      local left = tonumber(n) - 1      -- (a pcall: as fair_release's)
      local w = left == 0 and redis.pcall('set', k, '0' .. rest, 'px', ARGV[5])
                or redis.pcall('set', k, string.format('%d', left) .. rest, 'keepttl')
      if not w.err then return left end
    end
  end
end
--#include lib/release.lua
--#include lib/clear_grant.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_ms = tonumber(ARGV[5])
local k = KEYS[1]
local reply, left = release(k, owner, req, seq, token, keep_ms)
if left == 0 then                       -- as hand_over with nobody waiting
  redis.call('hdel', k, 'g')
  redis.call('pexpire', k, keep_ms)
elseif left then clear_grant(k, req) end
return reply
