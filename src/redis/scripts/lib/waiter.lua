-- The waiters of the default lock (and b of the read-write lock).
--
-- A release announces a freed lock only while a waiter may be listening:
-- a busy acquire's caller waits at most the time it is told (then looks
-- again, and is told again), so each busy acquire makes field b "until
-- when (ms, server time) someone may wait": the end of the longest wait
-- told so far. An uncontended lock never publishes.
--
-- The lock barges: a freed lock goes to whoever asks first, its releaser
-- too, which keeps it fast. But nobody waits long for it: a waiting
-- acquire says how long it has waited, and v = "<since>:<requester>"
-- keeps the longest waiter (since: ms, server time). A release that frees
-- the lock once v has waited STARVE_MS (lib/reserve.lua) reserves it for v alone, r =
-- "<until>:<requester>", for at most RESERVE_MS (v then wakes, with the
-- others, on the announcement, and takes it); v is spent (set to ''), and
-- the waiters still busy after that name the next. Anyone else is told
-- busy until the reservation is taken or runs out. A wait that times out
-- withdraws with its last try (waited -1); one ended by an error with the
-- cancel its client sends (void.lua, lib/withdraw.lua), at once or in the
-- background; a dead waiter costs the lock RESERVE_MS once.

-- note_busy(k, b, v, req, now, wait_ms, waited): a busy acquire of lock k
-- (b, v: its fields, as read) by requester req tells it to wait up to
-- wait_ms; waited: how long req has waited so far (ms), or < 0 if it
-- does not wait. One HSET at most.
local function note_busy(k, b, v, req, now, wait_ms, waited)
  local set = {}
  if tonumber(b or '0') < now + wait_ms then
    set[#set + 1], set[#set + 2] = 'b', now + wait_ms
  end
  local vs, who = (v or ''):match('^(%d+):(.*)$')
  if waited >= 0 then
    local since = now - waited
    if not vs or since < tonumber(vs) then
      set[#set + 1], set[#set + 2] = 'v', since .. ':' .. req
    end
  elseif who == req then                -- its last try: it waits no more
    set[#set + 1], set[#set + 2] = 'v', ''
  end
  if #set > 0 then redis.call('hset', k, unpack(set)) end
end
