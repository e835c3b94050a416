-- Take one more hold of a fair lock, its queue only where it is: a reentry while its slot migrates.
--
-- For a reentry while its slot is mid-migration (TRYAGAIN: the lock, its
-- counter and its queue are not all on this node; an empty queue counts
-- as missing). As fair_acquire's reentry: one more hold of the tenancy,
-- which mints nothing. A fresh acquire (a new tenancy, a grant, a place
-- in the queue) needs the counter and the queue, so it is not sent here
-- (op.c), and is told busy if it is.
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: as acquire's
-- ARGV[2] req: as acquire's
-- ARGV[3] seq: as acquire's
-- ARGV[4] lease_ms: as acquire's
-- ARGV[5] expect: as acquire's
-- ARGV[6] token: as acquire's
-- returns: as acquire's; {0, 10} for a fresh acquire
-- resend: as acquire's
-- The fast path: a reentry of a lock in its short form (README.md, THE
-- SHORT FORM) with no queue here, which stays in that form, as fair_join
-- (lib/fair_join.lua) does it on the hash: the rest would make the hash
-- first, which a slot mid-migration refuses (lib/short.lua). (A queue
-- that is elsewhere mid-migration errs under the pcall: the rest.)
do
  local k, owner, seq = KEYS[1], ARGV[1], ARGV[3]
  if ARGV[2] == owner and ARGV[5] ~= '0' and seq:byte(1) ~= 48 then
    local v = redis.pcall('get', k)
    local n, t, q, o
    if type(v) == 'string' then n, t, q, o = v:match('^(%d+)|(%d+)|(%d+)|[%de]*|g?|(.+)$') end
    local first = o == owner and redis.pcall('hget', k .. ':q', 'H')
    if o == owner and n ~= '0' and ARGV[5] == n and ARGV[6] == t and
       (#q < #seq or (#q == #seq and q < seq)) and (first == false or first == '') then
      local tm = redis.call('time')
      local due = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000) +
                  2 * tonumber(ARGV[4])
      local m = tonumber(n) + 1
      redis.call('set', k, string.format('%d', m) .. '|' .. t .. '|' .. seq .. '|' ..
                 string.format('%d', due) .. '||' .. owner, 'keepttl')
      redis.call('pexpire', k, ARGV[4], 'gt')
      return {1, m, tonumber(t)}
    end
  end
end
--#include lib/now.lua
--#include lib/request.lua
--#include lib/reentry_lost.lua
--#include lib/unqueue.lua
--#include lib/holder.lua
--#include lib/here.lua
--#include lib/shares_due.lua
--#include lib/fair_join.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local k = KEYS[1]
local of, qf = 'o' .. owner, 'q' .. req
local hf = holder_field(owner, req)    -- (lib/holder.lua)
local f, mine, t, answer = read_request(k, of, qf, seq, 'g', 'D')
local shares_end = f[6]
if shares_due(k, shares_end) then          -- (lib/shares_due.lua)
  f, mine, t, answer = read_request(k, of, qf, seq, 'g', 'D')
end
if answer then return answer end
if reentry_lost(k, hf, expect, token, mine, t) then return {-1} end
local n, grant = tonumber(f[1] or '0'), f[5]
if expect <= 0 or n <= 0 then return {0, 10} end
mine = fair_join(k, of, hf, qf, req, seq, n, lease, now_ms(), grant)
local q = here(k .. ':q')
if q then unqueue(q, req) end
return {1, mine, t}
