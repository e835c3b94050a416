-- Redis Cluster: fair-lock and semaphore releases (and close's drops)
-- while their slot migrates, before and after their keys move.
local dlock = require "dlock"
local helper = require "helper"

-- A fair lock's and a semaphore's scripts take the lock and its queue
-- (and the fair lock the slot's counter). While their slot migrates, a
-- key not on the node counts as missing, an empty queue too: Redis
-- answered TRYAGAIN to every release for the whole migration, before any
-- key had moved, and the lock stayed held for everyone.
describe("fair-lock and semaphore releases while their slot migrates", function()
  local topology = require "topology"
  local cl
  setup(function() cl = topology.cluster(3) end)
  teardown(function() if cl then cl.stop() end end)

  -- A fair lock F and a semaphore S of one slot, on one client; m.start()
  -- begins the slot's migration, m.move(key, ...) moves keys one by one,
  -- m.finish() moves the rest and gives the slot to the target.
  local function migration(what)
    local tag = helper.unique_name(what):gsub("[{}]", "")
    local m = { F = "x{" .. tag .. "}f", S = "x{" .. tag .. "}s" }
    m.kf, m.ks = helper.lock_key(m.F), helper.lock_key(m.S)
    m.slot = cl.keyslot(m.kf)
    assert.equals(m.slot, cl.keyslot(m.ks))
    local from = cl.owner(m.slot)
    local to = from % 3 + 1
    m.src, m.dst = cl.nodes[from], cl.nodes[to]
    m.opts = { cluster = cl.urls, lease = 3, command_timeout = 0.5 }
    m.spawn_opts = ("{ cluster = { %q }, lease = 3, command_timeout = 0.5 }"):format(cl.urls[1])
    function m.start()
      assert.equals("OK", m.dst.cli("cluster", "setslot", m.slot, "importing", cl.ids[from]))
      assert.equals("OK", m.src.cli("cluster", "setslot", m.slot, "migrating", cl.ids[to]))
    end
    function m.move(...)
      for _, k in ipairs({ ... }) do
        local r = m.src.cli("migrate", "127.0.0.1", m.dst.port, "", 0, 5000, "keys", k)
        assert.equals("OK", r, "MIGRATE " .. k)
      end
    end
    function m.asking(...)                  -- a read on the importing node
      local p = assert(io.popen(("printf 'ASKING\\n%s\\n' | redis-cli -p %d"):format(
        table.concat({ ... }, " "), m.dst.port)))
      local out = p:read("*a")
      p:close()
      return out:match("^OK\n(.-)\n?$")
    end
    function m.finish()
      for k in m.src.cli("cluster", "getkeysinslot", m.slot, 100):gmatch("[^\n]+") do
        local r = m.src.cli("migrate", "127.0.0.1", m.dst.port, "", 0, 5000, "keys", k)
        assert.is_true(r == "OK" or r == "NOKEY", "MIGRATE " .. k .. ": " .. r)
      end
      for i, h in ipairs(cl.nodes) do
        assert.equals("OK", h.cli("cluster", "setslot", m.slot, "node", cl.ids[to]), "node " .. i)
      end
    end
    return m
  end

  -- c holds F and a permit of S (one permit), then the slot starts to move.
  local function held(m)
    local c, d = assert(dlock.connect(m.opts)), assert(dlock.connect(m.opts))
    finally(function() c:close(); d:close() end)
    local f, s = c:fair_lock(m.F), c:semaphore(m.S, 1)
    assert(f:acquire())
    local id = assert(s:acquire())
    return c, d, f, s, id
  end

  -- Both releases answer at once (not after TRYAGAIN's command timeout).
  local function release_both(f, s, id)
    local t0 = dlock.now()
    assert.same({ true, 0 }, { f:release() })
    assert.same({ true }, { s:release(id) })
    local took = dlock.now() - t0
    assert.is_true(took < 0.45, ("the releases took %.2f s"):format(took))
  end

  -- A fresh fair tenancy needs its lock, counter and queue on one node (a
  -- token is never minted without the counter): a waiter gets F once the
  -- migration ends.
  local function fair_waiter_gets_it(m, before_finish)
    local w = helper.spawn("fair_wait", m.spawn_opts, m.F, 0.2)
    finally(function() w.signal("KILL") end)
    assert(helper.wait_for(function() return w.output():find("waiting") end, 5))
    dlock.sleep(0.3)
    if before_finish then before_finish() end
    m.finish()
    assert(helper.wait_for(function() return w.output():find("released") end, 8),
           "the waiter never got F: " .. w.output())
    assert.matches("released true", w.output())
  end

  it("run before any key has moved: the permit goes to another client at once", function()
    local m = migration("before")
    local _, d, f, s, id = held(m)
    m.start()
    release_both(f, s, id)
    assert.equals("0", helper.lock_field(m.src, m.kf, "n"))     -- freed where the keys are
    assert.equals("1", m.src.cli("exists", m.kf))        -- nothing moved
    local s2 = d:semaphore(m.S, 1)
    local id2 = assert(s2:acquire{ wait = 0 })           -- a permit needs no counter
    assert.same({ true }, { s2:release(id2) })
    fair_waiter_gets_it(m)
  end)

  it("run on the target once their keys moved (ASK), the queue and counter not", function()
    local m = migration("asked")
    local _, d, f, s, id = held(m)
    m.start()
    m.move(m.kf, m.ks)
    release_both(f, s, id)
    local v = m.asking("type", m.kf) == "string" and helper.short_fields(m.asking("get", m.kf))
    assert.equals("0", v and v.n or m.asking("hget", m.kf, "n"))   -- freed on the target
    local s2 = d:semaphore(m.S, 1)
    local id2 = assert(s2:acquire{ wait = 0 })
    assert.same({ true }, { s2:release(id2) })
    fair_waiter_gets_it(m)
  end)

  it("run at close too: the drops of a closed client's holds, before any key has moved", function()
    local m = migration("closed")
    local c = assert(dlock.connect(m.opts))
    local f, s = c:fair_lock(m.F), c:semaphore(m.S, 1)
    assert(f:acquire())
    assert(f:acquire())                                  -- (two holds: one DROP of both)
    assert(s:acquire())
    m.start()
    c:close()
    assert.equals("0", helper.lock_field(m.src, m.kf, "n"))
    assert.equals("0", helper.lock_field(m.src, m.ks, "n"))
    fair_waiter_gets_it(m)
  end)

  it("run with a waiter queued whose queue moved first; it gets in once the keys are together", function()
    local m = migration("queued")
    local _, _, f, s, id = held(m)
    local fw = helper.spawn("fair_wait", m.spawn_opts, m.F, 0.2)
    local sw = helper.spawn("sem_wait", m.spawn_opts, m.S, 1)
    finally(function() fw.signal("KILL"); sw.signal("KILL") end)
    assert(helper.wait_for(function()
      return m.src.cli("exists", m.kf .. ":q") == "1" and m.src.cli("exists", m.ks .. ":q") == "1"
    end, 5), "the waiters never queued")
    m.start()
    m.move(m.kf .. ":q", m.ks .. ":q")
    release_both(f, s, id)
    -- the semaphore's waiter looks again within 1 s and gets the permit
    assert(helper.wait_for(function() return sw.output():find("released") end, 5),
           "the semaphore's waiter never got a permit: " .. sw.output())
    -- the fair lock's waiter is granted once F, its counter and its queue
    -- are on one node again, before the slot is given to the target
    assert.is_falsy(fw.output():find("got"))
    m.move(m.kf, helper.fence_key(m.F))
    assert(helper.wait_for(function() return fw.output():find("released") end, 8),
           "the fair waiter never got F: " .. fw.output())
    m.finish()
  end)
end)
