-- owner_of(req): the owner that requester req acts for (a requester is
-- "<client id>|<owner>", or the owner itself: README.md, DATA).
local function owner_of(req)
  local i = req:find('|', 1, true)       -- (a plain find: no pattern)
  return i and req:sub(i + 1) or req
end
