--#include lib/request.lua
--#include lib/shares_due.lua
-- The start of an acquire of a lock that may have shared owners.

-- read_request_due(k, of, qf, seq, ...): read_request (lib/request.lua)
-- whose extra fields ... end with 'D', after ending the shares of lock k
-- whose time is over (lib/shares_due.lua), if D says some may be: its
-- four values, then D as it is now, then the server's clock if read.
local function read_request_due(k, of, qf, seq, ...)
  local at = 4 + select('#', ...)
  local f, mine, t, answer = read_request(k, of, qf, seq, ...)
  local ended, now = shares_due(k, f[at])
  if ended then
    f, mine, t, answer = read_request(k, of, qf, seq, ...)
  end
  return f, mine, t, answer, f[at], now
end
