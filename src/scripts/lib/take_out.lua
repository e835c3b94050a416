-- take_out(k, of, mine, d, n, ...): take d holds of owner field of (mine
-- of them: never more) out of lock k, which has n holds in all; ...: more
-- field, value pairs to set with n. Returns the holds left in all (0: the
-- lock is free; the caller says what that does: announce, or a fair
-- lock's hand_over).
local function take_out(k, of, mine, d, n, ...)
  if d >= mine then d = mine; redis.call('hdel', k, of)
  else redis.call('hincrby', k, of, -d) end
  n = math.max(n - d, 0)
  redis.call('hset', k, 'n', n > 0 and n or '0', ...)  -- ('0': unformatted)
  return n
end
