-- A shared owner's shares (README.md, DATA). Of an owner shared between
-- clients, each client's holds (h<requester>, lib/holder.lua) count until
-- d<requester> (ms, server time): the end of the lease of that client's
-- last acquire, renewal or extend there. A co-owner's renewal never
-- moves another client's d, so the holds of a client that died or was
-- cut off end with its own lease, however long its co-owners keep the
-- lock. D is a time no later than any d of the hash (kept while one is);
-- a script that finds D passed ends the shares whose time is over
-- (lib/shares_due.lua).

-- share_until(k, hf, until_ms): the share of holder field hf (the
-- requester's h field) in lock k lasts at least until until_ms.
local function share_until(k, hf, until_ms)
  local df = 'd' .. hf:sub(2)
  local f = redis.call('hmget', k, df, 'D')
  local own_end, first_end = f[1], f[2]
  local d = math.max(tonumber(own_end or '0'), until_ms)
  local first = math.min(tonumber(first_end or d), d)
  redis.call('hset', k, df, string.format('%d', d), 'D', string.format('%d', first))
end
