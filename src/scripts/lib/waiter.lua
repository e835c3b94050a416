-- A release announces a freed lock only while a waiter may be listening.
-- A busy acquire's caller waits at most the time it is told (then looks
-- again, and is told again), so each busy acquire makes field b of the
-- lock's hash "until when (ms, server time) someone may wait": the end of
-- the longest wait told so far. An uncontended lock never publishes.
--
-- mark_waiter(k, b, now, wait_ms): a busy acquire of lock k (b: its field
-- b, as read) tells its caller to wait up to wait_ms.
local function mark_waiter(k, b, now, wait_ms)
  if tonumber(b or '0') < now + wait_ms then
    redis.call('hset', k, 'b', now + wait_ms)
  end
end
