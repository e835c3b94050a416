-- founder(req, seq): who began a tenancy, written beside its token (f):
-- the client id of requester req (its first part) and the request id
-- seq, unique among all clients. On Redlock the masters that hold one
-- tenancy agree on it; holds that agree on a token by chance do not
-- (exec.c, grant_token).
local function founder(req, seq)
  return req:match('^[^|:]*') .. ':' .. seq
end
