-- Redis faults: slow, paused, killed and restarted servers.
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

  it("bounds a call on a server that does not answer (DEBUG SLEEP)", function()
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.2 })
    local sleeper = helper.spawn("sh", "redis-cli -p " .. srv.port .. " debug sleep 1")
    dlock.sleep(0.1)
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
    local sleeper = helper.spawn("sh", "redis-cli -p " .. srv.port .. " debug sleep 0.6")
    dlock.sleep(0.1)
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

  it("bounds a call while clients are paused (CLIENT PAUSE)", function()
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

  it("ends a wait with 'connection' or 'timeout' within the wait bound", function()
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
end)

describe("fork() #fork", function()
  local ok_fork, forktest = pcall(require, "forktest")

  it("leaves the parent's holds to the parent; the child makes its own client", function()
    if not ok_fork then return pending("forktest module not built") end
    local srv = helper.redis()
    local c = assert(helper.client{ lease = 0.5 })
    local name = helper.unique_name()
    local l = c:lock(name)
    assert(l:acquire())
    local key, field = "dlock:{" .. name .. "}", "o" .. c.id .. ":1"
    local result = helper.tmp .. "/fork-" .. name:gsub(":", "_")
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
    assert.equals("1", srv.cli("hget", key, field))
    dlock.sleep(1.2)                             -- > 2 leases
    assert.is_true(l:held())
    assert.equals("1", srv.cli("hget", key, field))
    assert(l:release())
    c:close()
  end)
end)

-- Issue 27, item 7: any client allowed to write a held lock's key can give
-- it a huge TTL. The wait bound computed from it overflowed (UBSan), and
-- acquire{ wait = 1 } sent some 24,000 scripts in its second.
describe("a held lock with a huge TTL", function()
  local srv
  lazy_setup(function() srv = helper.start_redis() end)
  lazy_teardown(function() srv.stop() end)

  local function evalsha_calls()
    local s = srv.cli("info", "commandstats")
    return tonumber(s:match("cmdstat_evalsha:calls=(%d+)")) or 0
  end

  it("makes a waiter wait for a release, not spin", function()
    local name = helper.unique_name("hugettl")
    local holder = assert(dlock.connect{ url = srv.url })
    assert(holder:lock(name):acquire{ lease = 60 })
    assert.equals("1", srv.cli("pexpire", "dlock:{" .. name .. "}", "9223000000000000000"))
    local c = assert(dlock.connect{ url = srv.url })
    local l = c:lock(name)
    local before = evalsha_calls()
    local ok, err, retry = l:acquire{ wait = 1 }
    local sent = evalsha_calls() - before
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert.is_true(retry == nil or retry > 0)
    assert.is_true(sent < 50, sent .. " scripts in one second of waiting")
    c:close()
    holder:close()
  end)
end)
