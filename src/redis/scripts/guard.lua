-- Run one command only while a hold is its lock's current tenancy
-- (lock:guard): the same owner holds it, with the same fencing token. A
-- write so guarded never lands after the hold was lost, whatever the
-- delay between the client's check and Redis running it.
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] data: on Cluster, the command's key (its first argument), the
--   lock's key elsewhere: declared so that Redis does not run the script
--   while a slot migration has the two keys on two nodes (TRYAGAIN),
--   where the command would write to an empty copy of its key
-- ARGV[1] owner: whose hold
-- ARGV[2] token: the hold's tenancy
-- ARGV[3] cmd: the command; its arguments follow it, ARGV[4] on (its
--   keys in the lock's Cluster slot: the client checks)
-- returns: the command's reply (its error too, as an error) | the error
--   "DLOCKLOST ..." when the hold is not the current tenancy: nothing ran
-- resend: no request id: a copy runs the command again if the hold is
--   still the current tenancy (the client resends none after a node
--   failed: topology.c)
--#include lib/short_view.lua
local owner, token, cmd = ARGV[1], ARGV[2], ARGV[3]
local k = KEYS[1]
local first = (unpack(ARGV, 4))                  -- the command's key, if any
if KEYS[2] ~= k and KEYS[2] ~= first then       -- (only declared: see KEYS[2])
  return redis.error_reply('ERR guard: KEYS[2] is neither the lock\'s key ' ..
                           'nor the command\'s')
end
local f = redis.pcall('hmget', k, 'o' .. owner, 't')
if f.err then                                    -- the short form
  local h = short_view(k)
  f = { h[7] == 'o' .. owner and h[8] or nil, h[4] }
end
local held, t = f[1], f[2]
if not held or tonumber(held) <= 0 or t ~= token then
  return redis.error_reply('DLOCKLOST the hold is no longer the lock\'s ' ..
                           'current tenancy: the command did not run')
end
return redis.pcall(cmd, unpack(ARGV, 4))
