-- holder_field(owner, req): the field that counts requester req's own
-- holds of owner, "h"..req, when req is one client acting for an owner
-- that other clients may share ("<client id>|<owner>"); nil when req is
-- the owner itself (a coroutine's, one client's: o<owner> counts them
-- already). Every script that adds a hold of owner for req adds it to
-- both; a release, a cancel and a drop take out only req's own
-- (lib/take_out.lua), so a client never takes a hold another client of
-- the owner took (after a failover that kept that client's request and
-- lost its own). Explicit owners are refused on Redlock (lua_lock.c).
local function holder_field(owner, req)
  if req == owner then return nil end
  return 'h' .. req
end
