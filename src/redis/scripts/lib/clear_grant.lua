-- clear_grant(k, req): requester req's client knows what it holds (it
-- released or cancelled): no grant of k left for it to adopt.
local function clear_grant(k, req)
  if redis.call('hget', k, 'g') == req then
    redis.call('hdel', k, 'g')
  end
end
