-- owner_of(req): the owner that requester req acts for (a requester is
-- "<client id>|<owner>", or the owner itself: README.md, DATA).
local function owner_of(req)
  return req:match('^[^|]*|(.*)$') or req
end
