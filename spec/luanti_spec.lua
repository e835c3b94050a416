-- dlock inside a game server: two of Debian's minetestserver
-- (Luanti 5.6, which embeds LuaJIT) share one Redis and run the example
-- mod examples/luanti/dlock_event, trusted, in worlds of the devtest game,
-- on loopback UDP ports. The mod loads dlock with a plain
-- ie.require("dlock") from the insecure environment, and runs its world
-- event under one lock from a job that a globalstep resumes every tick.
-- Checked here, from the servers' logs: one event at a time across both
-- servers, with growing fencing tokens; the servers kept ticking while a
-- job waited; after a SIGKILL of the holder the other server takes the
-- lock within its lease; a SIGTERM frees the lock at once.
local dlock = require "dlock"
local helper = require "helper"

local root, sh = helper.root, helper.host_sh

-- The server itself: /usr/games/minetestserver is Debian's wrapper, which
-- adds the system's --config and --logfile.
local SERVER = "/usr/lib/minetest/minetestserver"
local GAMES = "/usr/share/games/minetest/games"
local LEASE, DURATION = 3, 2           -- seconds; every server tries again 0.2 s after its event

--- The events a server's log shows, in its order: { n, token, begin,
--- waited, ticks, longest, ["end"] } (times are the mod's dlock.now()),
--- and the mod's warnings and the errors that name dlock.
local function events(log)
  local list, by_n, trouble = {}, {}, {}
  for line in (helper.read_file(log) or ""):gmatch("[^\n]+") do
    local n, token, t, waited, ticks, longest = line:match("%[dlock_event%] event (%d+) begins on .-, "
      .. "token (%d+), t=([%d.]+): waited ([%d.]+) s over (%d+) ticks, longest tick ([%d.]+) s")
    if n then
      local e = { n = tonumber(n), token = tonumber(token), begin = tonumber(t),
                  waited = tonumber(waited), ticks = tonumber(ticks), longest = tonumber(longest) }
      list[#list + 1], by_n[e.n] = e, e
    end
    local en, et = line:match("%[dlock_event%] event (%d+) ends on .-, token %d+, t=([%d.]+)")
    if en and by_n[tonumber(en)] then by_n[tonumber(en)]["end"] = tonumber(et) end
    if (line:match("ERROR%[") and line:find("dlock", 1, true)) or line:match("WARNING%[.-%[dlock_event%]") then
      trouble[#trouble + 1] = line
    end
  end
  return list, trouble
end

describe("two Luanti servers with the example mod", function()
  it("run one world event at a time, tick on while waiting, and survive a crash #luanti #timing", function()
    if not sh(("test -x %s && test -d %s/devtest"):format(SERVER, GAMES)) then
      pending("needs minetest-server and minetest-data")
      return
    end
    -- dlock for the servers' LuaJIT, built from this tree into the run's
    -- tmp (never with the make flags of an enclosing make asan or tsan).
    local build = helper.tmp .. "/luanti-build"
    local built, out = sh(("cd '%s' && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "
      .. "make -s LUA=luajit BUILD=%s %s/dlock/core.so"):format(root, build, build))
    assert(built, out)
    local srv = helper.start_redis()

    -- Two servers, each with its own world, home and UDP port on loopback,
    -- and the example's minetest.conf lines, the timings made short.
    local example = assert(helper.read_file(root .. "/examples/luanti/minetest.conf"))
    -- (the mod loads dlock the plain way: no require of its own to lend it)
    local init = assert(helper.read_file(root .. "/examples/luanti/dlock_event/init.lua"))
    assert.truthy(init:find('\nlocal dlock = ie.require("dlock")\n', 1, true))
    local set = { ["dlock_event.redis_url"] = srv.url, ["dlock_event.lease"] = LEASE,
                  ["dlock_event.every"] = 0.2, ["dlock_event.duration"] = DURATION }
    local servers, ports = {}, {}
    for _, name in ipairs({ "A", "B" }) do
      local port = helper.free_port(ports, "udp")
      local dir = ("%s/luanti-%s"):format(helper.tmp, name)
      assert(sh(("mkdir -p %s/home %s/world/worldmods && cp -r '%s/examples/luanti/dlock_event' %s/world/worldmods/")
        :format(dir, dir, root, dir)))
      local f = assert(io.open(dir .. "/world/world.mt", "w"))
      f:write("gameid = devtest\nbackend = sqlite3\nplayer_backend = sqlite3\n",
              "auth_backend = sqlite3\nmod_storage_backend = sqlite3\n")
      f:close()
      local conf = example:gsub("\n([%w_.]+) = [^\n]*", function(k)
        if set[k] then return ("\n%s = %s"):format(k, set[k]) end
      end)
      assert.truthy(conf:find("\nsecure.trusted_mods = dlock_event\n", 1, true))
      f = assert(io.open(dir .. "/minetest.conf", "w"))
      f:write(conf, ([[
dlock_event.lua_path = %s/lua/?.lua
dlock_event.lua_cpath = %s/?.so
server_name = %s
bind_address = 127.0.0.1
port = %d
ipv6_server = false
enable_ipv6 = false
server_announce = false
]]):format(root, build, name, port))
      f:close()
      local s = { name = name, dir = dir, log = dir .. "/debug.txt" }
      local _, pid = sh(("env HOME=%s/home %s --config %s/minetest.conf --world %s/world --logfile %s "
        .. ">%s/out.txt 2>&1 & echo $!"):format(dir, SERVER, dir, dir, s.log, dir))
      s.pid = assert(tonumber(pid:match("(%d+)%s*$")), pid)
      -- (tools/with-tmp.sh kills what a pidfile in the run's tmp names)
      f = assert(io.open(("%s/luanti-%s.pid"):format(helper.tmp, name), "w"))
      f:write(s.pid, "\n")
      f:close()
      function s.signal(sig) return (sh(("kill -%s %d"):format(sig, s.pid))) end
      servers[#servers + 1] = s
    end
    local c                               -- (busted keeps one finally per test)
    finally(function()
      for _, s in ipairs(servers) do s.signal("KILL") end
      for _, s in ipairs(servers) do
        helper.wait_for(function() return not helper.running(s.pid) end, 5)
      end
      if c then c:close() end
    end)
    local function why()                  -- what the servers said, for a failure
      local t = {}
      for _, s in ipairs(servers) do
        t[#t + 1] = ("--- %s (%s):\n%s%s"):format(s.name, helper.running(s.pid) and "running" or "gone",
          (helper.read_file(s.dir .. "/out.txt") or ""):sub(-1500),
          ((helper.read_file(s.log) or ""):gsub("[^\n]*WARNING[^\n]*deprecated[^\n]*\n", "")):sub(-3000))
      end
      return table.concat(t, "\n")
    end
    local function all()
      local list, trouble = {}, {}
      for _, s in ipairs(servers) do
        local l, tr = events(s.log)
        for _, e in ipairs(l) do e.server = s; list[#list + 1] = e end
        for _, line in ipairs(tr) do trouble[#trouble + 1] = s.name .. ": " .. line end
      end
      table.sort(list, function(a, b) return a.begin < b.begin end)
      return list, trouble
    end
    local function count(list, s, done)
      local n = 0
      for _, e in ipairs(list) do
        if e.server == s and (e["end"] or not done) then n = n + 1 end
      end
      return n
    end

    c = assert(dlock.connect(srv.url))

    -- 1. Both servers run events in turn: two whole ones each.
    local took = helper.wait_for(function()
      local list = all()
      return count(list, servers[1], true) >= 2 and count(list, servers[2], true) >= 2
    end, 25, 0.05)
    assert.truthy(took, "the servers did not run two events each:\n" .. why())

    -- 2. The holder dies: kill a server in the first second of one of its
    -- 2 s events (it is then surely holding the lock).
    local victim, last, t_kill, t_killed
    assert.truthy(helper.wait_for(function()
      local list = all()
      local e = list[#list]
      if e and not e["end"] and dlock.now() - e.begin < 1 then
        victim, last, t_kill = e.server, e, dlock.now()
        victim.signal("KILL")
        t_killed = dlock.now()
        return true
      end
    end, 10, 0.02), "no event began:\n" .. why())
    local survivor = victim == servers[1] and servers[2] or servers[1]
    assert.truthy(helper.wait_for(function() return not helper.running(victim.pid) end, 5))
    local taken = helper.wait_for(function()
      local list = all()
      local e = list[#list]
      return e and e.server == survivor and e.token > last.token and e
    end, LEASE + 5, 0.02)
    assert.truthy(taken, ("%s did not take over within %d s:\n%s"):format(survivor.name, LEASE + 5, why()))
    local takeover = taken.begin - t_kill

    -- 3. A server stopped by SIGTERM frees its lock at once, not when its
    -- lease runs out: the survivor, in the first second of an event.
    local lock = c:lock("world-event")
    local held, ttl, t_term
    assert.truthy(helper.wait_for(function()
      local list = all()
      local e = list[#list]
      if e and e.server == survivor and not e["end"] and dlock.now() - e.begin < 1 then
        held, ttl, t_term = e, lock:ttl(), dlock.now()
        survivor.signal("TERM")
        return true
      end
    end, 10, 0.02), "the survivor began no event:\n" .. why())
    assert.truthy(ttl and ttl > 1.5, "the survivor's lease: " .. tostring(ttl))
    local freed = helper.wait_for(function() return lock:ttl() == nil end, 5, 0.02)
    local freed_after = dlock.now() - t_term
    assert.truthy(freed, "the lock stayed taken after SIGTERM")
    assert.truthy(helper.wait_for(function() return not helper.running(survivor.pid) end, 10),
      "the survivor did not stop on SIGTERM")

    -- Every event, from both logs, in the order they began.
    local list, trouble = all()
    assert.same({}, trouble)
    local longest, waits = 0, 0
    for i, e in ipairs(list) do
      if i > 1 then
        local prev = list[i - 1]
        assert.is_true(e.token > prev.token, "tokens do not grow")
        assert.is_true(e.n == prev.n + 1, "the event count skips or repeats")
        local prev_end = prev.n == last.n and t_killed or prev["end"]
        assert.truthy(prev_end, ("event %d ended in no log"):format(prev.n))
        assert.is_true(e.begin > prev_end, ("event %d on %s began (t=%.6f) before event %d on %s ended (t=%.6f)")
          :format(e.n, e.server.name, e.begin, prev.n, prev.server.name, prev_end))
      end
      -- A job that waited kept the server ticking: a tick per 0.09 s of
      -- waiting (asked here: one per 0.5 s), none of them long. (Without
      -- the scheduler a wait blocks the server's main thread: no tick
      -- while it waits, then one as long as the wait, over 1 s here.)
      if e.waited >= 0.5 then
        waits = waits + 1
        assert.is_true(e.ticks >= math.floor(e.waited / 0.5),
          ("%s waited %.2f s over %d ticks"):format(e.server.name, e.waited, e.ticks))
      end
      assert.is_true(e.longest < 1, ("%s: a tick of %.3f s while it waited"):format(e.server.name, e.longest))
      longest = math.max(longest, e.longest)
    end
    assert.is_true(waits >= 3, "few waits: " .. waits)
    local function final(n)
      for _, e in ipairs(list) do if e.n == n then return e end end
    end
    assert.is_nil(final(last.n)["end"], "the victim's event ended: it was not killed while it held the lock")
    assert.equals(held.n, list[#list].n, "an event began after the SIGTERM")
    assert.is_nil(list[#list]["end"], "the survivor's event ended: the lock was freed by it, not by SIGTERM")
    assert.is_true(taken.waited > 1, ("%s waited %.2f s for a dead server's lock"):format(survivor.name, taken.waited))
    -- Within the lease, and some slack for a busy machine.
    assert.is_true(takeover < LEASE + 2, ("took over %.2f s after the kill (lease %d s)"):format(takeover, LEASE))
    assert.is_true(freed_after < ttl - 0.5, ("freed %.2f s after SIGTERM, with %.2f s of lease left")
      :format(freed_after, ttl))
    print(("\n    luanti: %d events, longest tick while waiting %.3f s, takeover %.2f s after SIGKILL "
      .. "(lease %d s), freed %.2f s after SIGTERM"):format(#list, longest, takeover, LEASE, freed_after))
  end)
end)
