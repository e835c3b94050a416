-- holder_field(owner, req): the field that counts requester req's own
-- holds of owner, "h"..req, when req is one client acting for an owner
-- that other clients may share ("<client id>|<owner>"); nil when req is
-- the owner itself (one client's: o<owner> counts them already).
local function holder_field(owner, req)
  if req == owner then return nil end
  return 'h' .. req
end
