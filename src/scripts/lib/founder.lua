-- founder(req, seq): who a shared owner's Redlock tenancy was granted
-- to, written beside its token (f) by the fence of that grant alone
-- (fence.lua), never by a mint: a late copy of a request, or a fair grant
-- to a waiter's registration, mints holds that no quorum granted
-- together, and they must not agree on a founder (found in review). A
-- mint that begins a shared owner's tenancy clears f. The client id of
-- requester req (its first part) and the request id seq: unique among
-- all clients. On Redlock the masters that hold one granted tenancy
-- agree on it; holds that agree on a token by chance do not (exec.c,
-- grant_token).
local function founder(req, seq)
  return req:match('^[^|:]*') .. ':' .. seq
end
