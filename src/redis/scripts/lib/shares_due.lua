--#include lib/now.lua
--#include lib/hash.lua
--#include lib/requester.lua
-- The end of a shared owner's shares whose time is over (lib/shares.lua).

-- end_shares(k, now): take the holds of every share of lock k whose time
-- is over (d <= now) out of its owner's count and of n, and set D to the
-- earliest d left (none: no D). Returns n as it is now.
local function end_shares(k, now)
  local h, gone, counts = read_hash(k), {}, {}
  local n, first = tonumber(h.n or '0'), nil
  for y, v in pairs(h) do
    if y:sub(1, 1) == 'd' then
      local r = y:sub(2)
      if tonumber(v) <= now then
        local of, c = 'o' .. owner_of(r), tonumber(h['h' .. r] or '0')
        counts[of] = (counts[of] or tonumber(h[of] or '0')) - c
        n = n - c
        gone[#gone + 1] = y
        gone[#gone + 1] = 'h' .. r
      elseif not first or tonumber(v) < first then
        first = tonumber(v)
      end
    end
  end
  for of, c in pairs(counts) do
    if c <= 0 then gone[#gone + 1] = of
    else redis.call('hset', k, of, string.format('%d', c)) end
  end
  if not first then gone[#gone + 1] = 'D' end
  if #gone > 0 then redis.call('hdel', k, unpack(gone)) end
  n = math.max(n, 0)
  if first then redis.call('hset', k, 'n', string.format('%d', n), 'D', string.format('%d', first))
  else redis.call('hset', k, 'n', string.format('%d', n)) end
  return n
end

-- shares_due(k, D): with D as read from lock k (nil: no shares), end the
-- shares whose time is over, if D says some may be. Returns whether it
-- did (the caller reads the hash again), and the server's clock if read.
local function shares_due(k, D)
  if not D then return false end
  local now = now_ms()
  if tonumber(D) > now then return false, now end
  end_shares(k, now)
  return true, now
end
