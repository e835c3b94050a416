--#include lib/take_out.lua
-- drop_holds(k, owner, req, count, token): take count holds of owner out
-- of lock k, requester req's own, if its tenancy is token's ('0': any).
-- Returns the holds left in all (0: free), or nil when req holds nothing
-- there.
local function drop_holds(k, owner, req, count, token)
  local of, hf = 'o' .. owner, holder_field(owner, req)
  local f = redis.call('hmget', k, of, 't', 'n', hf or 'n')
  local mine, hmine = tonumber(f[1] or '0'), hf and tonumber(f[4] or '0')
  if mine == 0 or hmine == 0 or (token ~= '0' and f[2] ~= token) then return nil end
  return take_out(k, of, mine, hf, hmine, count, tonumber(f[3] or '1'))
end
