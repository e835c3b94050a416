-- Redis faults: slow, paused, killed and restarted servers; dropped links
-- (SIGPIPE), a replica that never confirms, a wait behind a huge lease; and
-- a process that exits or forks while it holds locks.
local dlock = require "dlock"
local helper = require "helper"

local function elapsed(f)
  local t0 = dlock.now()
  local r = table.pack(f())
  return dlock.now() - t0, table.unpack(r, 1, r.n)
end

describe("command_timeout", function()
  local srv
  lazy_setup(function() srv = helper.start_redis("--enable-debug-command local") end)
  lazy_teardown(function() srv.stop() end)

  it("bounds a call on a server that does not answer (DEBUG SLEEP) #timing", function()
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.2 })
    local sleeper = helper.put_to_sleep(srv, 1)
    local t, ok, err = elapsed(function() return c:ping() end)
    assert.is_nil(ok)
    assert.matches("^connection", err)
    assert.matches("timed out", err)
    assert.is_true(t < 0.9, "took " .. t)       -- well before the server woke
    assert(helper.wait_for(function() return not sleeper.alive() end, 5))
    assert.is_true(c:ping())                     -- reconnects by itself
    c:close()
  end)

  it("does not count an acquire twice when it is resent after a timeout", function()
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.2 })
    local name = helper.unique_name()
    local l = c:lock(name)
    -- (asleep 2 s: under valgrind the acquire may go out well after the
    -- server fell asleep, and must still meet it asleep for 0.2 s)
    local sleeper = helper.put_to_sleep(srv, 2)
    local ok, err = l:acquire()                  -- sent, reply never read
    assert.is_nil(ok)
    assert.matches("^connection", err)
    assert(helper.wait_for(function() return not sleeper.alive() end, 5))
    -- the server ran it after waking: the hold exists in Redis...
    local key = "dlock:{" .. name .. "}"
    assert(helper.wait_for(function() return srv.cli("exists", key) == "1" end, 2))
    assert(l:acquire())                          -- ...and the resend finds it
    assert.equals(1, l:count())
    assert.same({ true, 0 }, { l:release() })
    assert.is_true(helper.is_free(srv, key))
    c:close()
  end)

  it("bounds a call while clients are paused (CLIENT PAUSE) #timing", function()
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.2 })
    srv.cli("client", "pause", "800")
    local t, ok, err = elapsed(function() return c:lock("p"):acquire() end)
    assert.is_nil(ok)
    assert.matches("^connection", err)
    assert.is_true(t < 0.7, "took " .. t)
    dlock.sleep(0.9)
    assert(c:lock("p2"):acquire())
    c:close()
  end)
end)

describe("a server that is killed", function()
  it("makes calls fail with 'connection', then works again after a restart", function()
    local srv = helper.start_redis()
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.3,
                                    connect_timeout = 0.3 })
    local l = c:lock(helper.unique_name())
    srv.stop()
    local ok, err = l:acquire()
    assert.is_nil(ok)
    assert.matches("^connection", err)
    assert.matches("^connection", select(2, c:ping()))
    srv.restart()
    assert(l:acquire())                          -- scripts reloaded on NOSCRIPT
    assert(l:release())
    c:close()
    srv.stop()
  end)

  it("marks a hold lost once its lease ran out without a confirmed renewal", function()
    local srv = helper.start_redis()
    local reasons = {}
    local c = assert(dlock.connect{ url = srv.url, lease = 0.4, command_timeout = 0.2,
      connect_timeout = 0.2, on_lost = function(_, why) reasons[#reasons + 1] = why end })
    local l = c:lock(helper.unique_name())
    assert(l:acquire())
    srv.stop()
    assert(helper.wait_for(function() return not l:held() end, 3))
    assert(helper.wait_for(function() c:poll(); return #reasons > 0 end, 3))
    assert.matches("^lost", reasons[1])
    srv.restart()
    local ok, err = l:release()
    assert.is_nil(ok)
    assert.matches("^lost", err)
    assert(l:acquire())                          -- works again
    assert(l:release())
    c:close()
    srv.stop()
  end)

  it("reports holds lost after a restart that forgot them", function()
    local srv = helper.start_redis()
    local lost = 0
    local c = assert(dlock.connect{ url = srv.url, lease = 0.6,
      on_lost = function() lost = lost + 1 end })
    local l = c:lock(helper.unique_name())
    assert(l:acquire())
    srv.restart()                                -- no persistence: lock gone
    assert(helper.wait_for(function() c:poll(); return lost > 0 end, 3))
    assert.is_false(l:held())
    c:close()
    srv.stop()
  end)

  it("ends a wait with 'connection' or 'timeout' within the wait bound #timing", function()
    local srv = helper.start_redis()
    local name = helper.unique_name()
    local holder = helper.spawn("hold", srv.url, name, 30)
    assert(helper.wait_for(function() return holder.output():match("held") end, 10))
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.3,
                                    connect_timeout = 0.3 })
    local killer = helper.spawn("sh", "sleep 0.3; kill -9 " .. srv.pid)
    local t, ok, err = elapsed(function() return c:lock(name):acquire{ wait = 1.5 } end)
    assert.is_nil(ok)
    assert.is_truthy(err:match("^connection") or err:match("^timeout"))
    assert.is_true(t < 2.5, "took " .. t)
    holder.signal("KILL")
    assert(helper.wait_for(function() return not killer.alive() end, 3))
    srv.pid = nil
    c:close()
  end)

  -- A wait rides out a short outage: within its wait an acquire tries
  -- again (backing off) while the server is out of reach, and fails at
  -- its end with the last connection error; one attempt fails at once.
  it("lets a finite wait ride out a restart, and fail at its end if the server stays down #timing", function()
    local srv = helper.start_redis()
    finally(function() srv.stop() end)
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.3,
                                    connect_timeout = 0.3 })
    finally(function() c:close() end)
    local l = c:lock(helper.unique_name())
    srv.stop()
    local ok, err = l:try_acquire()
    assert.is_nil(ok)
    assert.matches("^connection", err)
    -- still down at the end of the wait: the last connection error
    local t
    t, ok, err = elapsed(function() return l:acquire{ wait = 0.6 } end)
    assert.is_nil(ok)
    assert.matches("^connection", err)
    assert.is_true(t >= 0.5, "gave up after " .. t .. " s, before its wait")
    -- back within the wait: the lock
    srv.restart_after(0.5)
    ok, err = l:acquire{ wait = 20 }
    assert.truthy(ok, tostring(err) .. "; the server " ..
                      (srv.wait_up(1) and "is up again" or "did not come back"))
    assert(srv.wait_up())
    assert.is_true(l:held())
    assert.same({ true, 0 }, { l:release() })
  end)

  it("still fails a wait at once on a refusal (AUTH) that time does not end #timing", function()
    local srv = helper.start_redis()
    finally(function() srv.stop() end)
    local c = assert(dlock.connect{ url = srv.url, connect_timeout = 0.3 })
    finally(function() c:close() end)
    assert(c:ping())
    srv.cli("config", "set", "requirepass", "sekret")
    srv.cli("-a", "sekret", "--no-auth-warning", "client", "kill", "type", "normal")
    local t, ok, err = elapsed(function() return c:lock("x"):acquire{ wait = 10 } end)
    assert.is_nil(ok)
    assert.matches("^connection: NOAUTH", err)
    assert.is_true(t < 5, "took " .. t .. " s: it waited")
  end)
end)

describe("fork() #fork", function()
  local ok_fork, forktest = pcall(require, "forktest")

  it("leaves the parent's holds to the parent; the child makes its own client #timing", function()
    if not ok_fork then return pending("forktest module not built") end
    local srv = helper.redis()
    local c = assert(helper.client{ lease = 0.5 })
    local name = helper.unique_name()
    local l = c:lock(name)
    local function listeners()                   -- of forced releases
      return tonumber(srv.cli("pubsub", "numsub", "dlock:forced"):match("\n(%d+)%s*$")) or 0
    end
    local before = listeners()
    assert(l:acquire())
    local key, field = "dlock:{" .. name .. "}", "o" .. c.id .. ":1"
    local result = helper.tmp .. "/fork-" .. name:gsub(":", "_")
    -- Fork once the watchdog has made its subscription to forced releases
    -- (its first sleep with a hold): a fork in the middle of that connect
    -- leaves the child memory that only the parent's thread knew of.
    assert(helper.wait_for(function() return listeners() > before end, 10, 0.02))
    local pid = forktest.fork()
    if pid == 0 then                             -- the child
      local out = io.open(result, "w")
      local okp, e = pcall(c.ping, c)
      out:write("parent client: ", tostring(okp), " ", tostring(e), "\n")
      local c2 = dlock.connect(srv.url)
      local own = c2 and c2:lock(name .. ":child"):acquire()
      out:write("own client: ", tostring(own ~= nil), "\n")
      out:write("parent's lock from child: ", tostring((c2:lock(name):try_acquire())), "\n")
      out:close()
      os.exit(0, true)                           -- closes the state: __gc in the child
    end
    assert.equals(0, forktest.wait(pid))
    local out = helper.read_file(result)
    assert.matches("parent client: false .*another process", out)
    assert.matches("own client: true", out)
    assert.matches("parent's lock from child: nil", out)
    -- the child's exit released nothing of ours, and our watchdog goes on
    assert.equals("1", helper.lock_field(srv, key, field))
    dlock.sleep(1.2)                             -- > 2 leases
    assert.is_true(l:held())
    assert.equals("1", helper.lock_field(srv, key, field))
    assert(l:release())
    c:close()
  end)
end)

-- Any client allowed to write a held lock's key can give
-- it a huge TTL. The wait bound computed from it overflowed (UBSan), and
-- acquire{ wait = 1 } sent some 24,000 scripts in its second.
describe("a held lock with a huge TTL", function()
  local srv
  lazy_setup(function() srv = helper.start_redis() end)
  lazy_teardown(function() srv.stop() end)


  it("makes a waiter wait for a release, not spin", function()
    local name = helper.unique_name("hugettl")
    local holder = assert(dlock.connect{ url = srv.url })
    assert(holder:lock(name):acquire{ lease = 60 })
    assert.equals("1", srv.cli("pexpire", "dlock:{" .. name .. "}", "9223000000000000000"))
    local c = assert(dlock.connect{ url = srv.url })
    local l = c:lock(name)
    local before = helper.script_calls(srv)
    local ok, err, retry = l:acquire{ wait = 1 }
    local sent = helper.script_calls(srv) - before
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert.is_true(retry == nil or retry > 0)
    assert.is_true(sent < 50, sent .. " scripts in one second of waiting")
    c:close()
    holder:close()
  end)
end)

describe("SIGPIPE", function()
  it("stays as the host set it, and a dead link still does not kill the process", function()
    local srv = helper.start_redis()
    local ok, out = helper.run_lua([[
      local dlock = require "dlock"
      local function ignored()          -- SIGPIPE (13) in this process's SigIgn
        local f = assert(io.open("/proc/self/status"))
        local mask = f:read("*a"):match("SigIgn:%s*(%x+)")
        f:close()
        return math.floor(tonumber(mask:sub(-4), 16) / 4096) % 2 == 1
      end
      local function child()            -- yes's status when head exits early
        local p = io.popen("bash -c 'yes | head -c1 >/dev/null; echo ${PIPESTATUS[0]}'")
        local s = p:read("*a"):match("%d+")
        p:close()
        return s
      end
      local c = assert(dlock.connect{ url = arg[1], command_timeout = 2 })
      print("open", ignored(), child())
      -- the server drops our connection; a large write then meets a reset
      os.execute("redis-cli -p " .. arg[2] .. " client kill type normal >/dev/null")
      dlock.sleep(0.2)
      local big = string.rep("x", 8 * 1024 * 1024)
      for _ = 1, 3 do
        os.execute("redis-cli -p " .. arg[2] .. " client kill type normal >/dev/null")
        dlock.sleep(0.1)
        print("big", c:lock(big):acquire{ wait = 0 })
      end
      print("alive", c:ping())
      c:close()
      print("closed", ignored(), child())
    ]], srv.url, srv.port)
    srv.stop()
    assert.is_true(ok, out)
    assert.matches("open\tfalse\t141", out)
    assert.matches("closed\tfalse\t141", out)
    assert.matches("alive\ttrue", out)
  end)
end)

describe("a wait behind a very long lease", function()
  it("waits in bounded polls behind a holder whose lease is 25 days", function()
    if not os.execute("command -v strace >/dev/null 2>&1") then
      return pending("strace is not installed")
    end
    local name = helper.unique_name("long")
    local holder = assert(helper.client())
    assert(holder:lock(name):acquire{ lease = 25 * 86400 })
    local trace = helper.tmp .. "/poll-" .. name:gsub(":", "_")
    -- a wait without a bound, traced: every poll has a timeout >= 0
    local script = helper.tmp .. "/longwait.lua"
    local f = assert(io.open(script, "wb"))
    f:write([[
      local dlock = require "dlock"
      local c = assert(dlock.connect(arg[1]))
      c:lock(arg[2]):acquire()
    ]])
    f:close()
    os.execute(("(timeout -s KILL 1.5 strace -f -e trace=poll -o '%s' %s '%s' '%s' '%s' " ..
                ">/dev/null 2>&1)"):format(trace, "env " .. helper.lua_cmd(), script,
                helper.url(), name))
    local log = helper.read_file(trace) or ""
    local polls, negative = 0, 0
    for line in log:gmatch("[^\n]+") do
      local t = line:match("poll%(.-%], %d+, (%-?%d+)")
      if t then
        polls = polls + 1
        if tonumber(t) < 0 then negative = negative + 1 end
      end
    end
    assert.is_true(polls > 0, "no poll traced:\n" .. log:sub(1, 500))
    assert.equals(0, negative)
    holder:close()
  end)
end)

describe("sync_replicas that no replica confirms", function()
  it("reports a WAIT shortfall as quorum even when sync_timeout >= command_timeout", function()
    local srv = helper.start_redis()
    local c = assert(dlock.connect{ url = srv.url, sync_replicas = 1, sync_timeout = 0.4,
                                    command_timeout = 0.2 })
    local name = helper.unique_name("wait")
    local ok, err = c:lock(name):acquire()
    assert.is_nil(ok)
    assert.matches("^quorum", err)
    assert(helper.wait_for(function() return helper.is_free(srv, "dlock:{" .. name .. "}") end, 2))
    c:close()
    srv.stop()
  end)
end)

describe("process exit", function()
  local script = [[
    local dlock = require "dlock"
    local c = assert(dlock.connect(arg[1]))
    assert(c:lock(arg[2]):acquire())
    assert(c:lock(arg[3], { lease = 60 }):acquire())
    local explicit = c:lock(arg[4], { owner = "job" })
    assert(explicit:acquire()); assert(explicit:acquire())
    print("held")
    os.exit(0)                  -- no close, no __gc
  ]]

  it("releases what a client still holds when the program calls os.exit", function()
    local srv = helper.redis()
    local a, b, e = helper.unique_name("exit-a"), helper.unique_name("exit-b"),
                    helper.unique_name("exit-e")
    local ok, out = helper.run_lua(script, srv.url, a, b, e)
    assert.is_true(ok, out)
    assert.matches("held", out)
    for _, name in ipairs({ a, b, e }) do
      assert.is_true(helper.is_free(srv, "dlock:{" .. name .. "}"), name)
    end
  end)

  it("leaves a parent's holds alone when a forked child exits #fork", function()
    local ok, forktest = pcall(require, "forktest")
    if not ok then pending("forktest.so not built") return end
    local srv = helper.redis()
    local c = assert(helper.client())
    local name = helper.unique_name("fork-exit")
    local lock = c:lock(name)
    assert(lock:acquire())
    io.stdout:flush(); io.stderr:flush()         -- nothing for the child to write twice
    local pid = forktest.fork()
    if pid == 0 then os.exit(0) end              -- the child ends through exit(), state open
    forktest.wait(pid)
    assert.is_false(helper.is_free(srv, "dlock:{" .. name .. "}"))
    assert.is_true(lock:held())
    assert.same({ true, 0 }, { lock:release() })
    c:close()
  end)
end)
