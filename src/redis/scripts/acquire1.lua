-- acquire, without the counter: a reentry while its slot migrates.
--
-- For a reentry while its slot is mid-migration (TRYAGAIN: the lock and its counter are on two nodes for
-- now). A reentry mints nothing; a new tenancy needs the counter (a token
-- minted without it could come out below a later one), so a fresh
-- acquire is not sent here (op.c), and is told busy if it is.
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: as acquire's
-- ARGV[2] req: as acquire's
-- ARGV[3] seq: as acquire's
-- ARGV[4] lease_ms: as acquire's
-- ARGV[5] expect: as acquire's
-- ARGV[6] token: as acquire's
-- returns: as acquire's; {0, 10} for a new tenancy
-- resend: as acquire's
-- The fast path: a reentry of a lock in its short form (README.md, THE
-- SHORT FORM), which stays in that form, as acquire.lua's does it: the
-- rest of the script would make the hash first, which a slot mid-
-- migration refuses (lib/short.lua).
do
  local k, owner, seq = KEYS[1], ARGV[1], ARGV[3]
  if ARGV[2] == owner and ARGV[5] ~= '0' and seq:byte(1) ~= 48 then
    local v = redis.pcall('get', k)
    if type(v) == 'string' then
      local n, t, q, kv, g, o = v:match('^(%d+)|(%d+)|(%d+)|([%de]*)|(g?)|(.+)$')
      if o == owner and n ~= '0' and ARGV[5] == n and ARGV[6] == t and
         (#q < #seq or (#q == #seq and q < seq)) then
        local m = tonumber(n) + 1
        redis.call('set', k, string.format('%d', m) .. '|' .. t .. '|' .. seq .. '|' .. kv ..
                   '|' .. g .. '|' .. owner, 'keepttl')
        redis.call('pexpire', k, ARGV[4], 'gt')
        return {1, m, tonumber(t)}
      end
    end
  end
end
--#include lib/exclusive.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = ARGV[4], tonumber(ARGV[5]), ARGV[6]
return acquire_exclusive(KEYS[1], nil, owner, req, seq, lease, expect, token, -1)
