-- Redlock (servers = {...}) beyond the common lock API of ha_spec.lua:
-- retry jitter, a waiter's subscriber connections to a hung master, and
-- explicit owners, which a Redlock client refuses.
local dlock = require "dlock"
local helper = require "helper"

describe("Redlock retry jitter", function()
  it("gives different Redlock jitter in different processes (no shared random())", function()
    local outs = {}
    for i = 1, 2 do
      local ok, out = helper.run_lua([[
        local core = require "dlock.core"
        local t = {}
        for i = 1, 8 do t[i] = core.jitter() end
        print(table.concat(t, " "))
      ]])
      assert.is_true(ok, out)
      outs[i] = out
    end
    assert.are_not.equal(outs[1], outs[2])
  end)
end)

describe("a subscriber connection to a server that hangs", function()
  it("is bounded in its set-up (SELECT) by connect_timeout #timing", function()
    local srvs, urls = {}, {}
    for i = 1, 3 do
      srvs[i] = helper.start_redis()
      urls[i] = ("redis://127.0.0.1:%d/1"):format(srvs[i].port)  -- db 1: SELECT
    end
    local holder = assert(dlock.connect{ servers = urls })
    local name = helper.unique_name("hang")
    assert(holder:lock(name):acquire())
    srvs[3].signal("STOP")               -- accepts connections, answers nothing
    local script = helper.tmp .. "/hang-" .. name:gsub(":", "_") .. ".lua"
    local f = assert(io.open(script, "wb"))
    f:write([[
      local dlock = require "dlock"
      local c = assert(dlock.connect{ servers = { arg[1], arg[2], arg[3] },
                                      connect_timeout = 0.3, command_timeout = 0.3 })
      local t0 = dlock.now()
      local ok, err = c:lock(arg[4]):acquire{ wait = 1 }
      print("waited", dlock.now() - t0, ok, err)
    ]])
    f:close()
    local p = assert(io.popen(("timeout 10 env %s %s '%s' '%s' '%s' '%s' 2>&1"):format(
      helper.lua_cmd(), script, urls[1], urls[2], urls[3], name)))
    local out = p:read("*a")
    p:close()
    srvs[3].signal("CONT")
    local waited = tonumber(out:match("waited%s+([%d%.]+)"))
    assert.is_number(waited, out)
    assert.is_true(waited < 4, out)      -- wait 1 s, plus bounded set-ups
    assert.matches("timeout", out)
    holder:close()
    for i = 1, 3 do srvs[i].stop() end
  end)
end)

describe("an explicit owner on Redlock", function()
  -- Refused: each master counts a shared owner's holds on its own, and a
  -- lost message could give two holders or a repeated token
  -- (doc/scaling-out.md).
  local topology = require "topology"
  local m, r, one

  lazy_setup(function()
    m = topology.masters(3)
    r = assert(dlock.connect{ servers = m.urls })
    one = assert(dlock.connect{ url = m.urls[1] })
  end)
  lazy_teardown(function()
    r:close(); one:close()
    m.stop()
  end)

  local refused = "calling '([%w_]+)' with an explicit owner on a Redlock client %(servers = "
    .. "%.%.%.%): each master counts a shared owner's holds on its own, and a lost message "
    .. "can give two holders or a repeated token; use coroutine owners, or one server, "
    .. "Sentinel or Cluster"
  local makers = {                      -- (no tail calls: the caller's line stays)
    lock = function(c, name, o) local l = c:lock(name, o); return l end,
    fair_lock = function(c, name, o) local l = c:fair_lock(name, o); return l end,
    rwlock = function(c, name, o) local l = c:rwlock(name, o); return l end,
    multi_lock = function(c, name, o) local l = c:multi_lock({ name, name .. ":2" }, o); return l end,
    with = function(c, name, o) local ok = c:with(name, o, function() end); return ok end,
  }
  for _, kind in ipairs({ "lock", "fair_lock", "rwlock", "multi_lock", "with" }) do
    it(("refuses client:%s with an explicit owner, at the caller's line"):format(kind), function()
      local name = helper.unique_name("owner")
      local ok, err = pcall(makers[kind], r, name, { owner = "job" })
      assert.is_false(ok)
      assert.equals(kind, err:match(refused), err)   -- the function called
      assert.matches("^[^:]*redlock_spec%.lua:%d+: ", err)
      for _, srv in ipairs(m.servers) do               -- nothing was sent
        assert.equals("0", srv.cli("exists", "dlock:{" .. name .. "}"))
      end
    end)
  end

  it("refuses an owner in a lock's acquire options too (never an option there)", function()
    local l = r:lock(helper.unique_name("owner"))
    local ok, err = pcall(l.acquire, l, { owner = "job" })
    assert.is_false(ok)
    assert.matches("bad option 'owner' to 'acquire' %(unknown option%)", err)
  end)

  it("still takes coroutine owners' locks, fair locks, read-write locks and multi-locks", function()
    local name = helper.unique_name("coro")
    local l = r:lock(name)
    assert(l:acquire()); assert(l:acquire())          -- re-entered
    assert.is_true(l:token() > 0)
    assert(l:release()); assert(l:release())
    local f = r:fair_lock(name .. ":fair")
    assert(f:acquire()); assert(f:release())
    local rw = r:rwlock(name .. ":rw")
    assert(rw.read:acquire()); assert(rw.read:release())
    assert(rw.write:acquire()); assert(rw.write:release())
    local ml = r:multi_lock({ name .. ":a", name .. ":b" })
    assert(ml:acquire()); assert(ml:release())
    assert.same({ true, "done" }, { r:with(name, function() return "done" end) })
    -- a coroutine of its own is an owner of its own
    assert(l:acquire())
    local co = coroutine.wrap(function() return l:try_acquire() end)
    assert.is_nil((co()))
    assert(l:release())
  end)

  it("keeps explicit owners, shared between clients, on one server", function()
    local other = assert(dlock.connect{ url = m.urls[1] })
    finally(function() other:close() end)
    local name = helper.unique_name("shared")
    local a, b = one:lock(name, { owner = "job" }), other:lock(name, { owner = "job" })
    assert(a:acquire())
    assert(b:try_acquire())                            -- joins the owner's tenancy
    assert.equals(a:token(), b:token())
    assert.is_nil((one:lock(name):try_acquire()))      -- another owner waits
    assert(a:release()); assert(b:release())
    assert(one:fair_lock(name .. ":fair", { owner = "job" }):acquire())
    assert(one:rwlock(name .. ":rw", { owner = "job" }).read:acquire())
    assert(one:multi_lock({ name .. ":a", name .. ":b" }, { owner = "job" }):acquire())
    assert.same({ true, 1 }, { one:with(name, { owner = "job" }, function() return 1 end) })
  end)
end)

describe("a Redlock client idle while its masters restart", function()
  local topology = require "topology"

  -- Its links to them died while it was idle: its next call finds them
  -- dead on sending or on reading, and goes again on new ones, as a
  -- single-server client does (torture seed 1003, round 6: a client used
  -- seldom failed with a quorum error 9 s after the restarts).
  it("takes a lock at its first call after the restarts", function()
    local m = topology.masters(3)
    finally(function() m.stop() end)
    local c = assert(dlock.connect{ servers = m.urls })
    finally(function() c:close() end)
    local name = helper.unique_name("idle")
    local l = c:lock(name)
    assert(l:acquire())
    assert(l:release())
    m.servers[2].restart()
    m.servers[3].restart()
    local ok, err = l:acquire{ wait = 0 }
    assert.truthy(ok, tostring(err))
    assert(l:release())
    for _, s in ipairs(m.servers) do
      assert.equals("0", helper.lock_field(s, helper.lock_key(name), "n"))   -- freed on each
    end
  end)
end)
