-- Inspectable locks: client:inspect(name) and connect{ label }.
-- Who holds a lock, with how many holds, its TTL and token, and roughly
-- how many wait; each owner named by its client's label, which every
-- connection of that client carries as its CLIENT SETNAME.
local dlock = require "dlock"
local helper = require "helper"
local topology = require "topology"

--- A worker process (spec/support/worker.lua) and a wait for its first line.
local function worker(want, mode, ...)
  local w = helper.spawn(mode, ...)
  assert(helper.wait_for(function() return w.output():find(want, 1, true) end, 15),
    "worker never said " .. want .. ": " .. w.output())
  return w
end

describe("client:inspect #binding", function()
  local srv
  setup(function() srv = helper.start_redis() end)
  teardown(function() srv.stop() end)
  local function connect(opts)
    local o = { url = srv.url }
    for k, v in pairs(opts or {}) do o[k] = v end
    return assert(dlock.connect(o))
  end

  it("is nil for a free lock, and for one that was released", function()
    local c = connect()
    local name = helper.unique_name("free")
    assert.is_nil(c:inspect(name))
    local lock = c:lock(name)
    assert(lock:acquire())
    assert(lock:release())
    assert.is_nil(c:inspect(name))
    c:close()
  end)

  it("names the owner by its label, with count, TTL and token, and changes nothing", function()
    local c = connect{ label = "billing worker 7%", lease = 20 }
    local name = helper.unique_name("held")
    local lock = c:lock(name)
    assert(lock:acquire())
    assert(lock:acquire())                          -- reentrant: count 2
    local before = helper.lock_hgetall(srv, "dlock:{" .. name .. "}")
    local pttl = tonumber(srv.cli("pttl", "dlock:{" .. name .. "}"))
    local info = assert(c:inspect(name))
    assert.equals(1, #info.owners)
    local o = info.owners[1]
    assert.equals("billing worker 7%", o.label)     -- spaces and % survive
    assert.equals(1, o.count)                       -- Redis: one per client
                                                    -- (lock:count() has both)
    assert.equals(c.id, o.client)
    assert.is_nil(o.owner)                          -- a coroutine owner
    assert.equals(lock:token(), info.token)
    assert.is_true(info.ttl > 0 and info.ttl <= 20, tostring(info.ttl))
    assert.is_true(math.abs(info.ttl * 1000 - pttl) < 2000)
    assert.equals(0, info.waiters)
    assert.equals(before, helper.lock_hgetall(srv, "dlock:{" .. name .. "}"))
    assert.equals(2, lock:count())
    assert(lock:release()); assert(lock:release())
    c:close()
  end)

  it("labels a client by host name and pid unless told", function()
    local c = connect()
    local name = helper.unique_name("default")
    local lock = c:lock(name)
    assert(lock:acquire())
    local host = helper.read_file("/proc/sys/kernel/hostname"):gsub("%s+$", "")
    local pid = helper.read_file("/proc/self/stat"):match("^(%d+)")
    assert.equals(host .. ":" .. pid, c:inspect(name).owners[1].label)
    -- and the server shows who is who
    assert.matches("name=dlock:" .. c.id .. ":" .. host:gsub("%p", "%%%0") .. ":" .. pid,
      srv.cli("client", "list"))
    assert(lock:release())
    c:close()
  end)

  it("names a holder in another process, and counts a waiter", function()
    local c = connect()
    local name = helper.unique_name("other")
    local holder = worker("held", "hold", ("{ url = %q, label = %q, lease = 1 }"):format(
      srv.url, "cron-7"), name, 60)
    local info = assert(c:inspect(name))
    assert.equals("cron-7", info.owners[1].label)
    assert.are_not.equal(c.id, info.owners[1].client)
    assert.equals(tonumber(holder.output():match("held (%d+)")), info.token)
    -- a second process waits on the lock: it listens on the lock's channel
    local w2 = helper.spawn("hold", ("{ url = %q, label = %q }"):format(srv.url, "late"), name, 0)
    assert(helper.wait_for(function()
      local i = c:inspect(name)
      return i and i.waiters >= 1
    end, 15), "the waiter was not counted")
    holder.signal("KILL")                           -- its lease ends within 1 s
    assert(helper.wait_for(function() return w2.output():find("release", 1, true) end, 20))
    assert.is_nil(c:inspect(name))
    c:close()
  end)

  it("shows explicit owners, shared ones summed, and read and write holds", function()
    local a, b = connect{ label = "a" }, connect{ label = "b" }
    local name = helper.unique_name("owners")
    local la = a:lock(name, { owner = "job-42" })
    local lb = b:lock(name, { owner = "job-42" })
    assert(la:acquire()); assert(lb:acquire())
    local info = assert(a:inspect(name))
    assert.equals(1, #info.owners)
    assert.equals("job-42", info.owners[1].owner)
    assert.equals(2, info.owners[1].count)
    assert.is_truthy(info.owners[1].label == "a" or info.owners[1].label == "b")
    assert(la:release()); assert(lb:release())

    local rw = helper.unique_name("rw")
    local r1, r2 = a:rwlock(rw), b:rwlock(rw)
    assert(r1.read:acquire()); assert(r2.read:acquire())
    info = assert(b:inspect(rw))
    assert.equals(2, #info.owners)
    local labels = {}
    for _, o in ipairs(info.owners) do
      assert.equals("read", o.mode)
      labels[#labels + 1] = o.label
    end
    table.sort(labels)
    assert.same({ "a", "b" }, labels)
    assert(r1.read:release()); assert(r2.read:release())
    assert(r1.write:acquire())
    info = assert(b:inspect(rw))
    assert.equals("write", info.owners[1].mode)
    assert.equals("a", info.owners[1].label)
    assert.equals(r1.write:token(), info.token)
    assert(r1.write:release())
    a:close(); b:close()
  end)

  it("counts a fair lock's queue and a semaphore's permits", function()
    local c = connect{ label = "queue" }
    local name = helper.unique_name("fairq")
    local f = c:fair_lock(name)
    assert(f:acquire())
    local w1 = worker("waiting", "fair_wait", srv.url, name, 0)
    local w2 = worker("waiting", "fair_wait", srv.url, name, 0)
    assert(helper.wait_for(function() return c:inspect(name).waiters == 2 end, 10),
      "waiters: " .. tostring(c:inspect(name).waiters))
    assert.equals("queue", c:inspect(name).owners[1].label)
    assert(f:release())
    assert(helper.wait_for(function()
      return w1.output():find("released", 1, true) and w2.output():find("released", 1, true)
    end, 20))

    local s = c:semaphore(helper.unique_name("sem"), 3)
    local p1, p2 = assert(s:acquire()), assert(s:acquire())
    local info = assert(c:inspect(s.name))
    local n = 0
    for _, o in ipairs(info.owners) do n = n + o.count; assert.equals("queue", o.label) end
    assert.equals(2, n)
    assert(s:release(p1)); assert(s:release(p2))
    assert.is_nil(c:inspect(s.name))
    c:close()
  end)

  it("still connects when the server refuses CLIENT SETNAME (no labels then)", function()
    srv.cli("acl", "setuser", "noclient", "on", ">pw", "~*", "&*", "+@all", "-client")
    local c = connect{ username = "noclient", password = "pw", label = "hidden" }
    local name = helper.unique_name("acl")
    local lock = c:lock(name)
    assert(lock:acquire())
    local info = assert(c:inspect(name))
    assert.equals(1, info.owners[1].count)
    assert.is_nil(info.owners[1].label)             -- CLIENT LIST is refused too
    assert.equals(c.id, info.owners[1].client)
    assert.is_nil(srv.cli("client", "list"):find(c.id, 1, true))   -- no name was set
    assert(lock:release())
    c:close()
  end)

  it("rejects bad arguments and labels", function()
    local c = connect()
    for _, bad in ipairs({ { nil, "lock name" }, { 42, "lock name" }, { "", "must not be empty" } }) do
      local ok, err = pcall(c.inspect, c, bad[1])
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'inspect'", err, 1, true)
      assert.matches(bad[2], err, 1, true)
    end
    for _, bad in ipairs({ 7, "", ("x"):rep(201), "a\0b" }) do
      local ok, err = pcall(dlock.connect, { url = srv.url, label = bad })
      assert.is_false(ok)
      assert.matches("bad option 'label' to 'dlock.connect'", err, 1, true)
    end
    c:close()
    assert.has_error(function() c:inspect("x") end)
  end)
end)

describe("client:inspect on Redlock #binding", function()
  it("answers for a quorum of masters", function()
    local m = topology.masters(3)
    local c = assert(dlock.connect{ servers = m.urls, label = "redlock" })
    local name = helper.unique_name("rl")
    assert.is_nil(c:inspect(name))
    local lock = c:lock(name)
    assert(lock:acquire())
    local info = assert(c:inspect(name))
    assert.equals("redlock", info.owners[1].label)
    assert.equals(lock:token(), info.token)
    m.servers[1].stop()                             -- two of three still say so
    info = assert(c:inspect(name))
    assert.equals(1, info.owners[1].count)
    m.servers[2].stop()                             -- one cannot
    local none, err = c:inspect(name)
    assert.is_nil(none)
    assert.matches("^quorum", err)
    c:close()
    m.stop()
  end)
end)
