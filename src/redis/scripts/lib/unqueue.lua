-- unqueue(q, r): take requester r out of a fair lock's queue q (a doubly
-- linked list in one hash: README.md, THE FAIR LOCK), registration,
-- secret and all; nothing if r is not queued.
local function unqueue(q, r)
  local f = redis.call('hmget', q, 'n' .. r, 'p' .. r)
  local n, p = f[1], f[2] or ''
  if not n then return end
  redis.call('hset', q, p == '' and 'H' or 'n' .. p, n)
  redis.call('hset', q, n == '' and 'T' or 'p' .. n, p)
  redis.call('hdel', q, 'n' .. r, 'p' .. r, 'r' .. r, 's' .. r)
  redis.call('hincrby', q, 'c', -1)
end
