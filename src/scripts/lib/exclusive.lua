--#include lib/now.lua
--#include lib/prune.lua
--#include lib/mint.lua
--#include lib/request.lua
--#include lib/reentry_lost.lua
--#include lib/drop_unknown.lua
--#include lib/raise_ttl.lua
--#include lib/waiter.lua
-- acquire_exclusive(k, counter, owner, req, seq, lease, expect, token):
-- take one hold of exclusive lock k (acquire.lua has the arguments and
-- the reply). A new tenancy's token comes from counter; with no counter
-- (acquire1: a slot mid-migration) a new tenancy is busy for 10 ms.
local function acquire_exclusive(k, counter, owner, req, seq, lease, expect, token)
  local of, qf = 'o' .. owner, 'q' .. req
  local f, mine, t, answer = read_request(k, of, qf, seq, 'b')
  if answer then return answer end
  if reentry_lost(expect, token, mine, t) then return {-1} end
  local n = tonumber(f[1] or '0')
  n, mine = drop_unknown(k, owner, req, expect, mine, n)
  local now = now_ms()
  if mine == 0 and n > 0 then
    local p = redis.call('pttl', k)
    mark_waiter(k, f[5], now, p)
    return {0, p}
  end
  if n <= 0 then
    if f[4] and not f[3] then           -- only a new requester adds fields
      prune(k, now, qf)
    end
    if not counter then return {0, 10} end
    t, mine = mint(counter, t), 1
    redis.call('hset', k, 'n', 1, of, 1, qf, seq, 't',
               string.format('%d', t), 'k' .. req, now + 2 * lease)
    redis.call('pexpire', k, lease)
    return {1, mine, t}
  end
  mine = redis.call('hincrby', k, of, 1)
  redis.call('hset', k, 'n', n + 1, qf, seq, 'k' .. req, now + 2 * lease)
  raise_ttl(k, lease)
  return {1, mine, t}
end
