--#include lib/holder.lua
--#include lib/take_out.lua
--#include lib/shares_due.lua
-- drop_holds(k, owner, req, count, token, after): take count holds of
-- owner out of lock k, requester req's own, if its tenancy is token's
-- ('0': any), and if no request of req later than request id after ran
-- there ('0': no check): a client that gave its holds up (lost) and then
-- acquired again may have joined the tenancy anew, and a DROP that came
-- after would take out that new hold, which its client believes in; the
-- old ones, if Redis still had them, then stay until the tenancy ends. Returns the holds left in all (0: free), or nil when req
-- holds nothing there, or nothing it gave up.
local function drop_holds(k, owner, req, count, token, after)
  local of, hf = 'o' .. owner, holder_field(owner, req)
  local f = redis.call('hmget', k, of, 't', 'n', hf or 'n', 'q' .. req, hf and 'D' or 'n')
  local mine, t, n = tonumber(f[1] or '0'), f[2], f[3]
  local hmine, record, shares_end = hf and tonumber(f[4] or '0'), f[5], f[6]
  if hf and shares_due(k, shares_end) then return drop_holds(k, owner, req, count, token, after) end
  if mine == 0 or hmine == 0 or (token ~= '0' and t ~= token) then return nil end
  if after ~= '0' and tonumber((record or '0'):match('^%d+')) > tonumber(after) then
    return nil
  end
  return take_out(k, of, mine, hf, hmine, count, tonumber(n or '1'))
end
