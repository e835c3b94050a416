-- client:call, a Redis command through the client's connections and
-- routing, and lock:guard, the same run only while a hold is still its
-- lock's current tenancy (src/redis/scripts/guard.lua; its steps are in
-- scripts_guard_spec). On one server, Sentinel and Cluster.
local dlock = require "dlock"
local helper = require "helper"

describe("client:call #binding", function()
  local c
  before_each(function() c = assert(helper.client()) end)
  after_each(function() c:close() end)

  it("returns replies as Lua values", function()
    local k = helper.unique_name("call")
    assert.equals("OK", c:call("SET", k, 5))            -- a status: its text
    assert.equals("5", c:call("GET", k))                -- a string
    assert.equals(6, c:call("INCR", k))                 -- an integer
    assert.equals(7, c:call("INCRBY", k, 1))            -- numbers go as text
    local v, err = c:call("GET", k .. ":none")          -- a null: nil alone
    assert.is_nil(v)
    assert.is_nil(err)
    assert.same({ "7", false, "7" }, c:call("MGET", k, k .. ":none", k))
    assert.equals(2, c:call("RPUSH", k .. ":l", "a", "b"))
    assert.same({ "a", "b" }, c:call("LRANGE", k .. ":l", 0, -1))
    assert.equals("PONG", c:call("PING"))               -- no key: any server
  end)

  it("gives an error reply as nil, 'redis: ...'", function()
    local k = helper.unique_name("call")
    c:call("SET", k, "x")
    local v, err = c:call("LPUSH", k, "y")
    assert.is_nil(v)
    assert.matches("^redis: WRONGTYPE", err)
    assert.is_true(c:ping())                            -- the link is fine
  end)

  it("raises on misuse, naming the argument", function()
    assert.has_error(function() c:call() end, "bad argument #1 to 'call' (a command name expected)")
    assert.has_error(function() c:call("GET", {}) end,
      "bad argument #2 to 'call' (string or number expected, got table)")
    assert.has_error(function() c.call(nil, "PING") end)
  end)

  it("raises on a Redlock client: there is no one server", function()
    local topology = require "topology"
    local m = topology.masters(3)
    finally(function() m.stop() end)
    local r = assert(dlock.connect{ servers = m.urls })
    finally(function() r:close() end)
    assert.has_error(function() r:call("PING") end)
    local ok, err = pcall(r.call, r, "PING")
    assert.is_false(ok)
    assert.matches("Redlock", err)
    -- and so does a guard: it ran on every master, each reply written to
    -- room for one
    local l = r:lock(helper.unique_name("guard"))
    assert(l:acquire())
    ok, err = pcall(l.guard, l, "SET", "k{" .. l.name .. "}", "v")
    assert.is_false(ok)
    assert.matches("calling 'guard' on a Redlock client", err)
    for _, srv in ipairs(m.servers) do               -- nothing ran
      assert.equals("0", srv.cli("exists", "k{" .. l.name .. "}"))
    end
    assert(l:release())
  end)
end)

describe("lock:guard #binding", function()
  local c
  before_each(function() c = assert(helper.client()) end)
  after_each(function() c:close() end)

  it("runs the command while the hold is the lock's, and returns its reply", function()
    local name = helper.unique_name("guard")
    local l = c:lock(name)
    local v, err = l:guard("SET", name .. ":data", "1")
    assert.is_nil(v)
    assert.equals("not held", err)
    assert(l:acquire())
    assert.equals("OK", l:guard("SET", name .. ":data", "2"))
    assert.equals(3, l:guard("INCR", name .. ":data"))
    assert.equals("3", c:call("GET", name .. ":data"))
    local _, werr = l:guard("LPUSH", name .. ":data", "x")   -- its own error
    assert.matches("^redis: WRONGTYPE", werr)
    assert.is_true(l:held())
    assert(l:release())
  end)

  it("changes nothing once the hold is gone, and reports it lost", function()
    local name = helper.unique_name("guard")
    local lost = {}
    local c2 = assert(helper.client{ on_lost = function(_, why) lost[#lost + 1] = why end })
    finally(function() c2:close() end)
    local l = c2:lock(name)
    assert(l:acquire())
    c:call("DEL", "dlock:{" .. name .. "}")             -- gone in Redis
    local other = c:lock(name)
    assert(other:acquire())                             -- and taken
    assert.equals("OK", other:guard("SET", name .. ":data", "theirs"))
    local v, err = l:guard("SET", name .. ":data", "mine")
    assert.is_nil(v)
    assert.matches("^lost: .*did not run", err)
    assert.equals("theirs", c:call("GET", name .. ":data"))
    assert.is_false(l:held())
    c2:poll()
    assert.equals(1, #lost)
    assert.same({ nil, "lost: the lock expired or was deleted" }, { l:guard("GET", name) })
    assert(other:release())
  end)

  it("works for a fair lock and a write lock; raises for a read lock or a semaphore", function()
    local name = helper.unique_name("guard")
    local f = c:fair_lock(name .. "f")
    assert(f:acquire())
    assert.equals("OK", f:guard("SET", name .. ":f", "1"))
    assert(f:release())
    local rw = c:rwlock(name .. "rw")
    assert(rw.write:acquire())
    assert.equals("OK", rw.write:guard("SET", name .. ":w", "1"))
    assert(rw.write:release())
    assert.has_error(function() rw.read:guard("GET", "x") end,
      "calling 'guard' on a read lock: a guard needs an exclusive hold (a lock, a fair lock or a write lock)")
    local sem = c:semaphore(name .. "s", 2)
    assert.is_nil(sem.guard)                            -- a semaphore has none
  end)

  -- A holder stopped past its fixed lease, then continued: its guarded
  -- write is refused, whatever it believes, and the new holder's stands.
  it("refuses the write of a holder that was stopped past its lease", function()
    local name = helper.unique_name("guard")
    local key = name .. ":data"
    local go = helper.tmp .. "/" .. name:gsub("%W", "_") .. ".go"
    local holder = helper.spawn("guarded", helper.url(), name, 1, go, key)
    finally(function() holder.signal("KILL") end)
    assert(helper.wait_for(function() return holder.output():find("held") end, 10))
    assert.is_true(holder.signal("STOP"))
    local l = c:lock(name)
    assert(l:acquire{ wait = 10 })                      -- once its lease ran out
    assert.equals("OK", l:guard("SET", key, "the new holder's"))
    assert.is_true(holder.signal("CONT"))
    assert(io.open(go, "wb")):close()
    assert(helper.wait_for(function() return holder.output():find("guard") end, 10))
    assert.matches("guard nil lost: ", holder.output())
    assert.equals("the new holder's", c:call("GET", key))
    assert(l:release())
  end)
end)

describe("client:call and lock:guard on Sentinel and Cluster #binding", function()
  local topology = require "topology"

  it("go to the master on Sentinel", function()
    local topo = topology.sentinel()
    finally(function() topo.stop() end)
    local s = assert(dlock.connect{ sentinels = topo.sentinel_urls, master = topo.name })
    finally(function() s:close() end)
    local name = helper.unique_name("sg")
    assert.equals("OK", s:call("SET", name, "v"))
    assert.equals("v", topo.master.cli("get", name))
    local l = s:lock(name)
    assert(l:acquire())
    assert.equals("OK", l:guard("SET", name .. ":data", "1"))
    assert.equals("1", topo.master.cli("get", name .. ":data"))
    assert(l:release())
  end)

  it("route by the first key on Cluster, and guard only keys in the lock's slot", function()
    local cl = topology.cluster(3)
    finally(function() cl.stop() end)
    local k = assert(dlock.connect{ cluster = cl.urls })
    finally(function() k:close() end)
    -- keys all over the cluster: each goes to its node
    for i = 1, 20 do assert.equals("OK", k:call("SET", "callkey" .. i, i)) end
    for i = 1, 20 do assert.equals(tostring(i), k:call("GET", "callkey" .. i)) end
    local name = helper.unique_name("cg")
    local l = k:lock(name)
    assert(l:acquire())
    assert.equals("OK", l:guard("SET", "data{" .. name .. "}", "1"))    -- the lock's tag
    assert.equals("1", k:call("GET", "data{" .. name .. "}"))
    -- a key of another slot is refused before anything is sent
    local other
    for i = 1, 100 do
      if cl.keyslot("x" .. i) ~= cl.keyslot("dlock:{" .. name .. "}") then other = "x" .. i break end
    end
    local ok, err = pcall(l.guard, l, "SET", other, "1")
    assert.is_false(ok)
    assert.matches("key '" .. other .. "' is in another Cluster slot than the lock", err)
    assert.is_nil(k:call("GET", other))
    assert(l:release())
  end)
end)
