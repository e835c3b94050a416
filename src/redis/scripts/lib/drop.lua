--#include lib/take_out.lua
--#include lib/shares_due.lua
-- drop_holds(k, owner, req, count, token, after): take count holds of
-- owner out of lock k, requester req's own, if its tenancy is token's
-- ('0': any), and if no request of req later than request id after ran
-- there ('0': no check): a client that gave its holds up (lost) and then
-- acquired again may have joined the tenancy anew, and a DROP that came
-- after would take out that new hold, which its client believes in (found
-- in review); the old ones, if Redis still had them, then stay until the
-- tenancy ends. Returns the holds left in all (0: free), or nil when req
-- holds nothing there, or nothing it gave up.
local function drop_holds(k, owner, req, count, token, after)
  local of, hf = 'o' .. owner, holder_field(owner, req)
  local f = redis.call('hmget', k, of, 't', 'n', hf or 'n', 'q' .. req, hf and 'D' or 'n')
  if hf and shares_due(k, f[6]) then return drop_holds(k, owner, req, count, token, after) end
  local mine, hmine = tonumber(f[1] or '0'), hf and tonumber(f[4] or '0')
  if mine == 0 or hmine == 0 or (token ~= '0' and f[2] ~= token) then return nil end
  if after ~= '0' and tonumber((f[5] or '0'):match('^%d+')) > tonumber(after) then
    return nil
  end
  return take_out(k, of, mine, hf, hmine, count, tonumber(f[3] or '1'))
end
