-- The same lock API on Redlock (independent masters), Sentinel and Cluster,
-- against real topologies started on loopback by spec/support/topology.lua.
local dlock = require "dlock"
local helper = require "helper"
local topology = require "topology"

-- A Lua table literal of connect options, for worker processes.
local function literal(opts)
  local parts = {}
  for k, v in pairs(opts) do
    if type(v) == "table" then
      local items = {}
      for i, u in ipairs(v) do items[i] = ("%q"):format(u) end
      v = "{" .. table.concat(items, ",") .. "}"
    else                                      -- (Lua 5.1 quotes numbers in %q)
      v = type(v) == "string" and ("%q"):format(v) or tostring(v)
    end
    parts[#parts + 1] = k .. "=" .. v
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

-- Several processes, one lock, a non-atomic counter: no update lost,
-- fencing tokens strictly increasing.
local function mutual_exclusion(opts, mode)
  local nproc, iters = 3, 60
  local outs, count, toks = helper.count_under_lock(nproc, mode or "counter", literal(opts),
    helper.unique_name("mx"), iters)
  for i = 1, nproc do assert.matches("done " .. i, outs[i]) end
  assert.equals(tostring(nproc * iters), count)
  assert.equals(nproc * iters, #toks)
  for k = 2, #toks do assert.is_true(toks[k] > toks[k - 1]) end
end

-- The common life of a lock, the same on every topology.
local function lifecycle(opts)
  local c = assert(dlock.connect(opts))
  local other = assert(dlock.connect(opts))
  local name = helper.unique_name()
  local l = c:lock(name)
  assert.equals(l, l:acquire())
  assert(l:acquire())
  assert.equals(2, l:count())
  local t = l:token()
  assert.is_true(l:ttl() > 0)
  assert.is_nil((other:lock(name):try_acquire()))
  assert.same({ true, 1 }, { l:release() })
  assert.same({ true, 0 }, { l:release() })
  assert(other:lock(name):acquire())
  assert.is_true(other:lock(name):token() > t)
  assert.is_true(other:lock(name):extend(5))
  assert.is_true(other:lock(name):force_release())
  assert.same({ true, "x" }, { c:with(name, function() return "x" end) })
  assert.is_true(c:ping())
  c:close(); other:close()
end

-- A fair lock: two waiters that queued one after the other get it in that
-- order, from one release; and it excludes like any lock. Redlock passes
-- its live masters: each must have queued a waiter before the next comes
-- (elsewhere the one queue is asked through client:inspect).
local function fair(opts, n, masters)
  local c = assert(dlock.connect(opts))
  local name = helper.unique_name("fair")
  local l = c:fair_lock(name)
  assert(l:acquire())
  local ws = {}
  local function queued(i)
    if not masters then
      local info = c:inspect(name)
      return info and info.waiters >= i
    end
    for _, m in ipairs(masters) do
      if tonumber(helper.lock_field(m, "dlock:{" .. name .. "}:q", "c")) ~= i then return false end
    end
    return true
  end
  for i = 1, n or 2 do
    ws[i] = helper.spawn("fair_wait", literal(opts), name, 0.2)
    assert(helper.wait_for(function() return ws[i].output():match("waiting") end, 10))
    assert(helper.wait_for(function() return queued(i) end, 15),
      "waiter " .. i .. " was not queued everywhere")  -- before the next one comes
  end
  assert(l:release())
  local at = {}
  for i, w in ipairs(ws) do
    assert.truthy(helper.wait_for(function() return w.output():match("released true") end, 15),
      w.output())
    at[i] = tonumber(w.output():match("got %d+ %d+ (%S+)"))
    if i > 1 then assert.is_true(at[i - 1] < at[i], "waiter " .. i .. " before " .. (i - 1)) end
  end
  c:close()
  mutual_exclusion(opts, "fair_counter")
end

describe("Redlock (servers)", function()
  local topo, opts

  lazy_setup(function()
    topo = topology.masters(5)
    opts = { servers = topo.urls, lease = 1, command_timeout = 0.3,
             connect_timeout = 0.3 }
  end)
  lazy_teardown(function() topo.stop() end)

  it("acquires, re-enters, extends and releases on a quorum", function()
    lifecycle(opts)
  end)

  it("refuses a semaphore, whose permits a quorum cannot count", function()
    local c = assert(dlock.connect(opts))
    local ok, err = pcall(c.semaphore, c, helper.unique_name("sem"), 2)
    assert.is_false(ok)
    assert.matches("calling 'semaphore' on a Redlock client", err)
    c:close()
  end)

  it("serves a fair lock's waiters in order, each grant confirmed by a quorum", function()
    fair(opts, 2, topo.servers)
  end)

  it("takes a multi-lock on a quorum, one token per name", function()
    local c = assert(dlock.connect(opts))
    local other = assert(dlock.connect(opts))
    local base = helper.unique_name("ml")
    local m = c:multi_lock{ base .. "b", base .. "a" }
    assert(m:acquire{ wait = 2 })
    local toks = m:tokens()
    assert.is_true(toks[base .. "a"] > 0 and toks[base .. "b"] > 0)
    assert.is_nil((other:multi_lock{ base .. "a" }:try_acquire()))
    assert(m:release())
    assert(other:multi_lock{ base .. "a", base .. "b" }:acquire{ wait = 2 })
    c:close(); other:close()
  end)

  it("holds the lock on a majority, and the watchdog keeps it #timing", function()
    local c = assert(dlock.connect(opts))
    local name = helper.unique_name()
    local l = c:lock(name)
    assert(l:acquire())
    dlock.sleep(2.2)                              -- > 2 leases
    assert.is_true(l:held())
    local n = 0
    for _, s in ipairs(topo.servers) do
      n = n + (s.cli("exists", "dlock:{" .. name .. "}") == "1" and 1 or 0)
    end
    assert.is_true(n >= 3)
    assert(l:release())
    c:close()
  end)

  it("keeps fencing tokens increasing when one master's counter ran ahead", function()
    local c = assert(dlock.connect(opts))
    local name = helper.unique_name()
    topo.servers[1].cli("set", helper.fence_key(name), "100")
    local l = c:lock(name)
    assert(l:acquire())
    assert.equals(101, l:token())                 -- the quorum's highest
    assert(l:release())
    topo.servers[1].stop()                        -- the one that ran ahead
    assert(l:acquire())
    assert.is_true(l:token() > 101)               -- written back to the others
    assert(l:release())
    topo.servers[1].restart()
    c:close()
  end)

  it("gives mutual exclusion across processes", function()
    mutual_exclusion({ servers = topo.urls })
  end)

  it("works with a minority down; a majority down gives 'quorum' in bounded time #timing", function()
    local c = assert(dlock.connect(opts))
    local l = c:lock(helper.unique_name())
    assert(l:acquire())
    topo.servers[4].stop()
    topo.servers[5].stop()
    local m = c:lock(helper.unique_name())
    assert(m:acquire())
    assert(m:release())
    fair(opts, 4, { topo.servers[1], topo.servers[2], topo.servers[3] })
    -- with two masters silent, waiters keep their places
    dlock.sleep(1.2)
    assert.is_true(l:held())                      -- renewed on 3 of 5
    topo.servers[3].stop()
    local t0 = dlock.now()
    local ok, err = c:lock(helper.unique_name()):acquire{ wait = 5 }
    assert.is_nil(ok)
    assert.matches("^quorum", err)
    assert.is_true(dlock.now() - t0 < 2, "took " .. (dlock.now() - t0))
    assert.matches("^quorum", select(2, c:ping()))
    assert(helper.wait_for(function() return not l:held() end, 3))
    c:close()
  end)
end)

describe("Sentinel (sentinels, master)", function()
  local topo, opts

  lazy_setup(function()
    topo = topology.sentinel()
    opts = { sentinels = topo.sentinel_urls, master = topo.name,
             command_timeout = 0.5, connect_timeout = 0.5 }
  end)
  lazy_teardown(function() topo.stop() end)

  it("finds the master through the sentinels", function()
    lifecycle(opts)
    local c = assert(dlock.connect(opts))
    local name = helper.unique_name()
    assert(c:lock(name):acquire())
    assert.equals("1", topo.master.cli("exists", "dlock:{" .. name .. "}"))
    c:close()
  end)

  it("with sync_replicas, waits for the replica to confirm an acquire", function()
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.sync_replicas, o.sync_timeout = 1, 2
    local c = assert(dlock.connect(o))
    local name = helper.unique_name()
    assert(c:lock(name):acquire())
    assert.equals("1", topo.replica.cli("exists", "dlock:{" .. name .. "}"))
    c:close()
    o.sync_replicas, o.sync_timeout = 2, 0.2      -- there is only one replica
    c = assert(dlock.connect(o))
    local l = c:lock(helper.unique_name())
    local ok, err = l:acquire()
    assert.is_nil(ok)
    assert.matches("^quorum", err)
    assert.is_false(l:held())
    assert.is_nil(l:ttl())                        -- taken back
    c:close()
  end)

  it("gives mutual exclusion across processes", function()
    mutual_exclusion({ sentinels = topo.sentinel_urls, master = topo.name })
  end)

  it("serves a fair lock's waiters in order", function()
    fair({ sentinels = topo.sentinel_urls, master = topo.name })
  end)

  it("keeps renewing a held lock on the new master after a failover #timing", function()
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.lease, o.sync_replicas = 4, 1               -- the replica has the lock
    local c = assert(dlock.connect(o))
    local l = c:lock(helper.unique_name())
    assert(l:acquire())
    topo.failover()
    dlock.sleep(2.5)                              -- renewals cross the failover
    assert.is_true(l:held())
    local key = "dlock:{" .. l.name .. "}"
    assert(helper.wait_for(function()
      return (tonumber((topo.master.cli("pttl", key))) or 0) > 2500
    end, 3))                                      -- renewed on the new master
    assert.same({ true, 0 }, { l:release() })
    assert.is_true(helper.is_free(topo.master, key))
    c:close()
  end)

  it("writes to the new master when a paused old master comes back", function()
    local c = assert(dlock.connect(opts))
    assert(c:lock(helper.unique_name()):acquire())  -- connected, listening
    local old = topo.master
    old.signal("STOP")
    local ok, err = pcall(topo.failover, 30, { reattach = false })
    old.signal("CONT")
    assert(ok, err)
    -- The old master still believes it is one until Sentinel demotes it; the
    -- +switch-master announcement sends dlock to the new one at once.
    local l = c:lock(helper.unique_name())
    assert(l:acquire{ wait = 5 })
    assert.equals("1", topo.master.cli("exists", "dlock:{" .. l.name .. "}"))
    assert(l:release())
    c:close()
  end)

  it("keeps working after a failover", function()
    local c = assert(dlock.connect(opts))
    assert(c:lock(helper.unique_name()):acquire())
    topo.failover()
    local l = c:lock(helper.unique_name())
    local ok = helper.wait_for(function() return l:acquire{ wait = 1 } end, 15, 0.1)
    assert.equals(l, ok)
    assert.equals("1", topo.master.cli("exists", "dlock:{" .. l.name .. "}"))
    assert(l:release())
    c:close()
  end)
end)

describe("Cluster (cluster)", function()
  local topo, opts

  lazy_setup(function()
    topo = topology.cluster(3)
    opts = { cluster = { topo.urls[1] }, command_timeout = 0.5,
             connect_timeout = 0.5, lease = 1 }
  end)
  lazy_teardown(function() topo.stop() end)

  it("routes locks in different slots to their nodes", function()
    lifecycle(opts)
    local c = assert(dlock.connect(opts))
    local seen = {}
    for i = 1, 30 do
      local name = "spread" .. i
      local l = c:lock(name)
      assert(l:acquire())
      local owner = topo.owner(topology.keyslot(topo, "dlock:{" .. name .. "}"))
      assert.equals("1", topo.nodes[owner].cli("exists", "dlock:{" .. name .. "}"))
      seen[owner] = true
    end
    assert.is_true(seen[1] and seen[2] and seen[3])
    c:close()
  end)

  it("wakes a waiter through shard channels", function()
    local name = helper.unique_name()
    local holder = helper.spawn("hold", literal({ cluster = topo.urls }), name, 0.5)
    assert(helper.wait_for(function() return holder.output():match("held") end, 10))
    local c = assert(dlock.connect(opts))
    local l = c:lock(name)
    assert(l:acquire{ wait = 10 })              -- holder's lease is 30 s
    assert.is_true(c:stats().wakeups >= 1)
    assert(l:release())
    c:close()
  end)

  it("gives mutual exclusion across processes", function()
    mutual_exclusion({ cluster = topo.urls })
  end)

  it("serves a fair lock's waiters in order", function()
    fair(opts)
  end)

  it("keeps a read-write lock's readers and writer apart #timing", function()
    local c = assert(dlock.connect(opts))
    local other = assert(dlock.connect(opts))
    local name = helper.unique_name("rw")
    local mine, theirs = c:rwlock(name), other:rwlock(name)
    assert(mine.read:acquire())
    assert(theirs.read:acquire())
    assert.is_nil((c:rwlock(name, { owner = "w" }).write:try_acquire()))
    assert(mine.read:release()); assert(theirs.read:release())
    assert(mine.write:acquire{ wait = 2 })
    assert.is_nil((theirs.read:try_acquire()))
    dlock.sleep(1.2)                               -- lease 1 s: renewed
    assert.is_true(mine.write:held())
    assert(mine.write:release())
    c:close(); other:close()
  end)

  it("takes a multi-lock over names on different nodes, all or none", function()
    local c = assert(dlock.connect(opts))
    local other = assert(dlock.connect(opts))
    local base, picked, owners = helper.unique_name("ml"), {}, {}
    for i = 1, 200 do                           -- one name per node
      local name = base .. i
      local owner = topo.owner(topology.keyslot(topo, "dlock:{" .. name .. "}"))
      if not owners[owner] then owners[owner] = name; picked[#picked + 1] = name end
      if #picked == 3 then break end
    end
    assert.equals(3, #picked)
    local m = c:multi_lock(picked)
    assert(m:acquire{ wait = 2 })
    for owner, name in pairs(owners) do
      assert.equals("1", topo.nodes[owner].cli("exists", "dlock:{" .. name .. "}"))
      assert.is_true(m:tokens()[name] > 0)
    end
    assert(m:release())
    local busy = other:lock(picked[3])           -- one node's name busy:
    assert(busy:acquire())
    assert.is_nil((m:try_acquire()))             -- none taken
    for _, name in ipairs({ picked[1], picked[2] }) do
      assert.is_false(c:lock(name):held())
      local node = topo.nodes[topo.owner(topology.keyslot(topo, "dlock:{" .. name .. "}"))]
      assert.is_nil(helper.lock_field(node, "dlock:{" .. name .. "}", "n"):match("^[1-9]"))
    end
    assert(busy:release())
    c:close(); other:close()
  end)

  it("follows a slot that moves while a lock is held #timing", function()
    local c = assert(dlock.connect(opts))
    local name = helper.unique_name()
    local l = c:lock(name)
    assert(l:acquire())
    local slot = topology.keyslot(topo, "dlock:{" .. name .. "}")
    local from = topo.owner(slot)
    local to = from % 3 + 1
    topo.move_slot(slot, to)
    dlock.sleep(1.2)                              -- renewals cross the move
    assert.is_true(l:held())
    assert.equals("1", topo.nodes[to].cli("exists", "dlock:{" .. name .. "}"))
    assert(l:acquire())                           -- reentry on the new node
    assert.same({ true, 1 }, { l:release() })
    assert.same({ true, 0 }, { l:release() })
    assert.is_true(helper.is_free(topo.nodes[to], "dlock:{" .. name .. "}"))
    c:close()
  end)

  -- A Cluster node given as url= (an everyday mistake) must not crash
  -- the process (SIGSEGV) on the first name whose slot lives on
  -- another node. Run in a child, so that a crash fails this test only.
  it("gives a clear error, not a crash, to a url= client of a Cluster node", function()
    local ok, out = helper.run_lua(([[
      local dlock = require "dlock"
      local c = assert(dlock.connect{ url = %q, command_timeout = 0.5, lease = 1 })
      local held, moved = 0, 0
      for i = 1, 20 do
        local l = c:lock("misrouted" .. i)
        local got, err = l:acquire{ wait = 0 }
        if got then held = held + 1; assert(l:release())
        else
          assert(err:match("^redis: MOVED %%d+ 127%%.0%%.0%%.1:%%d+ %%(the server is a " ..
                           "Redis Cluster node: connect with connect{ cluster = "), err)
          moved = moved + 1
        end
      end
      print("held " .. held .. " moved " .. moved)
      c:close()
    ]]):format(topo.urls[1]))
    assert.is_true(ok, out)
    local held, moved = out:match("held (%d+) moved (%d+)")
    assert.is_true(tonumber(held) > 0 and tonumber(moved) > 0, out)
  end)
end)
