-- HAProxy services for the dlock recipe (Lua 5.3 inside HAProxy).
local dlock = require "dlock"

-- Connect lazily, once per process, after HAProxy has forked its workers;
-- keep the client where a host that clears globals does not reach it.
local function client()
  local c = package.loaded["dlock.haproxy.client"]
  if not c then
    c = assert(dlock.connect{
      url = os.getenv("REDIS_URL"),
      -- A wait yields to HAProxy for 1 ms at a time: the thread serves
      -- other requests meanwhile. (core.msleep yields the Lua task.)
      scheduler = { wait = function(fd, timeout) core.msleep(1) end },
    })
    package.loaded["dlock.haproxy.client"] = c
  end
  return c
end

local function reply(applet, body)
  applet:set_status(200)
  applet:add_header("content-length", #body)
  applet:start_response()
  applet:send(body)
end

core.register_service("hold", "http", function(applet)
  local ok = client():lock(os.getenv("DLOCK_DEMO_LOCK") or "haproxy-demo"):with({ expire = 10 }, function()
    core.msleep(1000)                     -- the work, under the lock
  end)
  reply(applet, ok and "held\n" or "failed\n")
end)

core.register_service("wait", "http", function(applet)
  local t0 = dlock.now()
  local ok, err = client():lock(os.getenv("DLOCK_DEMO_LOCK") or "haproxy-demo"):with({ wait = 5 }, function() end)
  reply(applet, ("%s after %.0f ms\n"):format(ok and "got it" or err, (dlock.now() - t0) * 1000))
end)

core.register_service("ping", "http", function(applet)
  reply(applet, "pong\n")
end)
