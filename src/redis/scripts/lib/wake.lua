--#include lib/now.lua
-- wake(k, q, pub): a permit of semaphore k is free: wake the first live
-- waiter in queue q, through its client's channel (P{name}:ch:<client
-- id>; the requester starts with the client id). Waiters whose
-- registration lapsed leave the queue on the way.
local function wake(k, q, pub)
  local w = redis.call('zrange', q, 0, 0)[1]
  if w then                             -- (nobody queued: no clock needed)
    redis.call('zremrangebyscore', q, '-inf', now_ms())
    w = redis.call('zrange', q, 0, 0)[1]
  end
  if w then
    redis.call('zrem', q, w)
    redis.call(pub, k .. ':ch:' .. w:match('^[^|:]*'), 'permit')
  end
end
