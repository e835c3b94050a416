-- withdraw(k, req): requester req waits no more for lock k (its acquire
-- was cancelled: its wait ended in an error, or was given up): it is no
-- longer the longest waiter (v), and a reservation of the freed lock for
-- it (r) is over (lib/waiter.lua). A wait that goes on claims again with
-- its next busy try, since as before.
local function withdraw(k, req)
  local f, set = redis.call('hmget', k, 'v', 'r'), {}
  local longest, reserve = f[1], f[2]
  if (longest or ''):match('^%d+:(.*)$') == req then set[1], set[2] = 'v', '' end
  if (reserve or ''):match('^%d+:(.*)$') == req then
    set[#set + 1], set[#set + 2] = 'r', ''
  end
  if #set > 0 then redis.call('hset', k, unpack(set)) end
end
