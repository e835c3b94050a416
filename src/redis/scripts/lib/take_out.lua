--#include lib/holder.lua
-- take_out(k, of, mine, hf, hmine, d, n, ...): take d holds of owner
-- field of (mine of them) out of lock k, which has n holds in all: never
-- more than mine, and with hf (holder_field) never more than hmine, the
-- requester's own (a shared owner's other clients keep theirs; its share
-- ends with its last hold: lib/shares.lua). ...:
-- more field, value pairs to set with n. Returns the holds left in all
-- (0: the lock is free; the caller says what that does: announce, or a
-- fair lock's hand_over).
local function take_out(k, of, mine, hf, hmine, d, n, ...)
  if hf then
    if d >= hmine then d = hmine; redis.call('hdel', k, hf, 'd' .. hf:sub(2))
    else redis.call('hincrby', k, hf, -d) end
  end
  if d >= mine then d = mine; redis.call('hdel', k, of)
  else redis.call('hincrby', k, of, -d) end
  n = math.max(n - d, 0)
  redis.call('hset', k, 'n', n > 0 and n or '0', ...)  -- ('0': unformatted)
  if hf and n == 0 then redis.call('hdel', k, 'D') end  -- (lib/shares.lua)
  return n
end
