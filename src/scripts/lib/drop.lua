--#include lib/take_out.lua
-- drop_holds(k, owner, count, token): take count holds of owner out of
-- lock k, if its tenancy is token's ('0': any). Returns the holds left in
-- all (0: free), or nil when the owner holds nothing there.
local function drop_holds(k, owner, count, token)
  local of = 'o' .. owner
  local f = redis.call('hmget', k, of, 't', 'n')
  local mine = tonumber(f[1] or '0')
  if mine == 0 or (token ~= '0' and f[2] ~= token) then return nil end
  return take_out(k, of, mine, count, tonumber(f[3] or '1'))
end
