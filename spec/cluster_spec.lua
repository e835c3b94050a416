-- Redis Cluster faults: a slot that migrates, key by key, under held and
-- awaited locks. (The common lock API on Cluster is in ha_spec.lua.)
local dlock = require "dlock"
local helper = require "helper"

describe("live slot migration", function()
  it("keeps acquire, wait, renew and release working while a slot moves key by key #timing", function()
    local topology = require "topology"
    local cl = topology.cluster(3)
    local opts = { cluster = cl.urls, lease = 1.5, command_timeout = 0.5 }
    local c, other, waiter = assert(dlock.connect(opts)), assert(dlock.connect(opts)),
                             assert(dlock.connect(opts))
    local tag = helper.unique_name("mig"):gsub("[{}]", "")
    local A, B = "x{" .. tag .. "}a", "x{" .. tag .. "}b"      -- one slot
    local keyA, keyB = "dlock:{" .. A .. "}", "dlock:{" .. B .. "}"
    local la, lb = c:lock(A), other:lock(B)
    assert(la:acquire{ watchdog_lease = 20 })       -- (the waiter below)
    assert(lb:acquire())
    local slot = cl.keyslot(keyA)
    assert.equals(slot, cl.keyslot(keyB))
    local fence = helper.fence_key(A)
    assert.equals(slot, cl.keyslot(fence))
    local from = cl.owner(slot)
    local to = from % 3 + 1
    local src, dst = cl.nodes[from], cl.nodes[to]
    assert.equals("OK", dst.cli("cluster", "setslot", slot, "importing", cl.ids[from]))
    assert.equals("OK", src.cli("cluster", "setslot", slot, "migrating", cl.ids[to]))
    local function migrate(key, may_be_gone)
      local r = src.cli("migrate", "127.0.0.1", dst.port, "", 0, 5000, "keys", key)
      assert.is_true(r == "OK" or (may_be_gone and r == "NOKEY"), "MIGRATE " .. key .. ": " .. r)
    end

    local function asking_pttl(key)               -- the importing node needs ASKING
      local p = assert(io.popen(("printf 'ASKING\\nPTTL %s\\n' | redis-cli -p %d"):format(key, dst.port)))
      local out = p:read("*a")
      p:close()
      return tonumber(out:match("\n(%-?%d+)")) or -3
    end

    migrate(keyA)                                   -- A moved, B and the counter not
    dlock.sleep(1.2)                                -- renewals follow ASK
    assert.is_true(la:held())
    local ttl = asking_pttl(keyA)
    assert.is_true(ttl > 700, "A not renewed on the target: pttl " .. ttl)
    assert.same({ true, 0 }, { lb:release() })      -- on the source
    -- the lock and its slot's counter are on two nodes now (TRYAGAIN for a
    -- two-key script): a reentry still works; a fresh acquire waits for
    -- the counter (a token minted without it could go backwards later)
    local lc = c:lock("x{" .. tag .. "}c")
    local ok, err = lc:try_acquire()
    assert.is_nil(ok)
    assert.matches("TRYAGAIN", err)
    assert(la:acquire())
    assert.same({ true, 1 }, { la:release() })

    migrate(fence)                                  -- A and the counter moved
    local waiting = helper.spawn("hold", ("{ cluster = { %q }, lease = 1.5 }"):format(cl.urls[1]),
                                 A, 1.5)
    dlock.sleep(0.5)                                -- it waits for A
    assert.is_falsy(waiting.output():find("held"))
    -- The release runs on the target (ASK) and announces itself there; the
    -- waiter subscribed on the source, which still owns the slot, so it
    -- does not hear it. It was told to wait for A's TTL (20 s), but a
    -- waiter whose slot is mid-migration looks again every 0.1 s (A's
    -- freed key lives on meanwhile: no TRYAGAIN).
    assert.same({ true, 0 }, { la:release() })      -- ASK to the target
    assert(helper.wait_for(function() return waiting.output():find("held") end, 8),
           "the waiter never got A: " .. waiting.output())
    local lw = waiter:lock(A)
    assert.is_nil((lw:try_acquire()))               -- the other process holds it
    assert(helper.wait_for(function() return waiting.output():find("release") end, 5))
    assert.matches("release %S+ true 0", waiting.output())
    assert(lw:acquire{ wait = 3 })
    migrate(keyB, true)                             -- the rest (B's record may
                                                    -- have expired), then the slot
    for i, h in ipairs(cl.nodes) do
      assert.equals("OK", h.cli("cluster", "setslot", slot, "node", cl.ids[to]), "node " .. i)
    end
    dlock.sleep(1.2)                                -- renewals on the new owner
    assert.is_true(lw:held())
    assert.same({ true, 0 }, { lw:release() })
    assert(lb:acquire())                            -- a fresh acquire after the move
    assert(lb:release())
    assert(lc:acquire())
    local tc = lc:token()
    assert(lc:release())
    assert(lc:acquire())                            -- tokens still increase
    assert.is_true(lc:token() > tc, lc:token() .. " after " .. tc)
    assert(lc:release())
    c:close(); other:close(); waiter:close()
    cl.stop()
  end)
end)

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
    assert.equals("0", m.src.cli("hget", m.kf, "n"))     -- freed where the keys are
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
    assert.equals("0", m.asking("hget", m.kf, "n"))       -- freed on the target
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
    assert.equals("0", m.src.cli("hget", m.kf, "n"))
    assert.equals("0", m.src.cli("hget", m.ks, "n"))
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

-- A master that dies answers nothing: no MOVED tells the client where its
-- slots went. (The client used to learn the map only on MOVED, an unknown
-- redirect or connect: after its replica took over, acquires failed with
-- "Connection refused" for good, while a fresh client got the lock.)
describe("a Cluster master that dies", function()
  it("is replaced by its promoted replica, on the Lua thread and in the watchdog #timing", function()
    local topology = require "topology"
    local cl = topology.cluster(3, { replicas = 1 })
    finally(function() cl.stop() end)
    -- (a lease longer than the failover takes: no renewal can be
    -- confirmed while no master serves the slot)
    local opts = { cluster = cl.urls, lease = 15, connect_timeout = 0.3, command_timeout = 0.5 }
    local why = {}
    local c = assert(dlock.connect{ cluster = cl.urls, lease = 15, connect_timeout = 0.3,
      command_timeout = 0.5, on_lost = function(_, r) why[#why + 1] = r end,
      log = function(_, msg) why[#why + 1] = msg end })
    finally(function() c:close() end)
    local name, kept = helper.unique_name("dies"), nil
    local slot = cl.keyslot("dlock:{" .. name .. "}")
    local m = cl.owner(slot)
    -- a lock held across the failover, on the same master's slots
    for i = 1, 200 do
      local k = helper.unique_name("kept" .. i)
      if cl.owner(cl.keyslot("dlock:{" .. k .. "}")) == m then kept = k; break end
    end
    local l = c:lock(name)
    assert(l:acquire())
    assert(l:release())
    local lk = c:lock(kept)
    assert(lk:acquire())
    -- replicated before the kill (a fixed 0.3 s was once too short beside
    -- two busy loops: the promoted replica never had the hold)
    assert.equals("1", cl.nodes[m].cli("wait", "1", "5000"), "the replica never had the hold")
    cl.kill_master(m)
    -- the watchdog renews the kept hold on the new master, before the Lua
    -- thread has sent anything there: its TTL comes back up to the lease
    local probe = assert(dlock.connect(opts))
    finally(function() probe:close() end)
    local last
    local renewed = helper.wait_for(function()
      last = probe:lock(kept):ttl()
      return last and last > 14
    end, 10, 0.1)
    c:poll()
    assert.is_truthy(renewed, ("the kept hold was not renewed on the new master (TTL %s, lost %s: %s)")
      :format(tostring(last), tostring(c:stats().lost), table.concat(why, "; ")))
    assert.is_true(lk:held())
    assert(lk:release())
    -- and the Lua thread's own calls go there too
    local ok, err = l:acquire{ wait = 5 }
    assert.is_truthy(ok, "after the failover: " .. tostring(err))
    assert(l:release())
  end)
end)

-- Two coroutines of one state, waiting under a scheduler for locks held
-- on two masters: each waits on another node's subscriber. (A new socket
-- copy woke the waits on every other one, which made copies again: the
-- two spun at full CPU, stepping without end.)
describe("scheduler waits on two Cluster masters", function()
  for _, kind in ipairs({ "cqueues", "luv" }) do
    it("sleep until a release under  #timing" .. kind, function()
      if not pcall(require, kind) then pending(kind .. " is not installed") return end
      local topology = require "topology"
      local cl = topology.cluster(3)
      finally(function() cl.stop() end)
      local holder = assert(dlock.connect{ cluster = cl.urls })
      local c = assert(dlock.connect{ cluster = cl.urls, scheduler = kind })
      finally(function() c:close(); holder:close() end)
      local names, owners = {}, {}
      for i = 1, 500 do                      -- two names on two masters
        local n = helper.unique_name("two" .. i)
        local m = cl.owner(cl.keyslot(helper.lock_key(n)))
        if not owners[m] and #names < 2 then owners[m] = true; names[#names + 1] = n end
      end
      assert.equals(2, #names)
      local held = {}
      for i, n in ipairs(names) do
        held[i] = holder:lock(n, { owner = "h" })
        assert(held[i]:acquire())
      end
      local got, cpu0 = 0, os.clock()
      local function waiter(n) return function()
        assert(c:lock(n):acquire{ wait = 10 })
        got = got + 1
      end end
      local function release_later(s) return function()
        local t = dlock.now() + s
        while dlock.now() < t do
          if kind == "cqueues" then require("cqueues").sleep(0.05)
          else local uv, co = require "luv", coroutine.running()
            local tm = uv.new_timer()
            tm:start(50, 0, function() tm:close(); coroutine.resume(co) end)
            coroutine.yield() end
        end
        for _, l in ipairs(held) do assert(l:release()) end
      end end
      local fns = { waiter(names[1]), waiter(names[2]), release_later(1.5) }
      if kind == "cqueues" then
        local cq = require("cqueues").new()
        for _, f in ipairs(fns) do cq:wrap(f) end
        assert(cq:loop())
      else
        local uv = require "luv"
        for _, f in ipairs(fns) do
          local co = coroutine.create(f)
          local tm = uv.new_timer()
          tm:start(0, 0, function() tm:close(); assert(coroutine.resume(co)) end)
        end
        uv.run()
      end
      local cpu = os.clock() - cpu0
      assert.equals(2, got)
      assert.is_true(cpu < 0.6, ("%.2f s of CPU for 1.5 s of waiting"):format(cpu))
    end)
  end
end)
