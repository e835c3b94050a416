-- dlock_event: the servers of a network share one Redis, and at most one
-- of them runs the world event at a time. Each server asks to run it
-- `every` seconds after its last turn; the one that gets the lock runs it
-- for `duration` seconds while the others wait their turn, and every
-- server keeps ticking meanwhile. doc/luanti.md in dlock explains each step.
--
-- Settings (minetest.conf; ../minetest.conf has them all):
--   secure.trusted_mods = dlock_event      dlock is a C module: required
--   dlock_event.redis_url                  default redis://127.0.0.1:6379/0
--   dlock_event.lease                      seconds, default 10
--   dlock_event.every                      seconds, default 300
--   dlock_event.duration                   seconds, default 30
--   dlock_event.lua_path, .lua_cpath       where dlock is, if not where LuaJIT looks

-- Only a trusted mod gets the insecure environment, and only here, in the
-- main chunk of init.lua while the mods load. Keep it in this local: any
-- code that gets hold of it can do whatever the server's user can.
local ie = minetest.request_insecure_environment()
if not ie then
  error("dlock_event: add it to secure.trusted_mods in minetest.conf", 0)
end

local settings = minetest.settings
local function number(name, default)
  return tonumber(settings:get("dlock_event." .. name)) or default
end

-- Load dlock with the insecure environment's require. Its search paths
-- are ie.package's: the sandbox's `package` is only a copy. `make install`
-- puts dlock under /usr/local, where LuaJIT looks already.
local path, cpath = settings:get("dlock_event.lua_path"), settings:get("dlock_event.lua_cpath")
if path then ie.package.path = path .. ";" .. ie.package.path end
if cpath then ie.package.cpath = cpath .. ";" .. ie.package.cpath end
local dlock = ie.require("dlock")

-- Jobs are coroutines that a globalstep resumes once per server tick
-- (0.09 s by default). A job that waits for a lock yields (see the
-- scheduler below) and the server goes on ticking; the job looks again at
-- a later tick, and sees a release at the next tick after it. Without the
-- scheduler a wait would block the thread that runs the game and every
-- mod: no tick until the lock is free. A job that raises is logged and
-- dropped.
local jobs = {}
-- tick counts the ticks; longest_tick is the longest time between two
-- of them since a job last set it to 0 (the job below, when it asks for
-- the lock: so it says how well the server ticked while the job waited).
local tick, last_tick, longest_tick = 0, nil, 0

minetest.register_globalstep(function()
  local now = dlock.now()
  if last_tick then longest_tick = math.max(longest_tick, now - last_tick) end
  last_tick, tick = now, tick + 1
  for i = #jobs, 1, -1 do
    local co = jobs[i]
    local ok, err = coroutine.resume(co)
    if not ok then minetest.log("error", "[dlock_event] a job failed: " .. tostring(err)) end
    if coroutine.status(co) == "dead" then table.remove(jobs, i) end
  end
end)

-- In a job: let the server tick for s seconds.
local function sleep(s)
  local till = dlock.now() + s
  repeat coroutine.yield() until dlock.now() >= till
end

-- One client for the mod. Its connections and its watchdog thread live in
-- C, outside the sandbox. Each call but a wait is one blocking round trip
-- to Redis on the game's thread: keep Redis close. If Redis cannot be
-- reached now, the server does not start (assert): no events without it.
local client = assert(dlock.connect{
  url = settings:get("dlock_event.redis_url") or "redis://127.0.0.1:6379/0",
  -- The watchdog renews a held lock every lease/3, however long the
  -- server's ticks take. A server that crashes keeps its locks until the
  -- lease runs out: that is how long the other servers wait for them.
  lease = number("lease", 10),
  scheduler = { wait = function(fd, timeout) coroutine.yield() end },
})
-- A server that stops (SIGTERM, /shutdown) frees its locks at once.
minetest.register_on_shutdown(function() client:close() end)

local server = settings:get("server_name") or ""
if server == "" then server = "the server on port " .. (settings:get("port") or "30000") end
local lock = client:lock("world-event")
local every, duration = number("every", 300), number("duration", 30)

-- The event, run under the lock. Each line it logs has its fencing token
-- and t, dlock.now(): the host's monotonic clock, which lines up the logs
-- of servers on one host (to the microsecond: one server's event may begin
-- within a millisecond of another's end).
local function world_event(asked, at_tick)
  -- Number the event in Redis. lock:guard runs INCR only while this hold
  -- is still the lock's current tenancy: a server that lost the lock
  -- (paused past its lease, say) cannot count an event twice.
  local n, err = lock:guard("INCR", "world-event:count{world-event}")
  if not n then
    minetest.log("warning", "[dlock_event] not counted: " .. err)
    return
  end
  minetest.log("action", ("[dlock_event] event %d begins on %s, token %d, t=%.6f: "
    .. "waited %.2f s over %d ticks, longest tick %.3f s")
    :format(n, server, lock:token(), dlock.now(), dlock.now() - asked,
            tick - at_tick, longest_tick))
  minetest.chat_send_all(("World event #%d begins on %s!"):format(n, server))
  sleep(duration)                 -- the event runs, tick by tick, holding the lock
  minetest.chat_send_all(("World event #%d is over."):format(n))
  minetest.log("action", ("[dlock_event] event %d ends on %s, token %d, t=%.6f")
    :format(n, server, lock:token(), dlock.now()))
end

jobs[#jobs + 1] = coroutine.create(function()
  while true do
    local asked, at_tick = dlock.now(), tick
    longest_tick = 0
    -- with: acquire (waiting as long as it takes, a yield per tick), run
    -- the event, release, whatever the event does.
    local ok, err = lock:with(world_event, asked, at_tick)
    if not ok then minetest.log("warning", "[dlock_event] no event this time: " .. err) end
    sleep(every)
  end
end)
