-- The read-write lock, the semaphore and the multi-lock with
-- real processes, stopped holders and waiters, and waits that yield to a
-- scheduler's loop.
local dlock = require "dlock"
local helper = require "helper"

describe("the lock family #binding", function()
  local srv, c
  lazy_setup(function() srv = helper.start_redis() end)
  lazy_teardown(function() srv.stop() end)
  before_each(function() c = assert(dlock.connect(srv.url)) end)
  after_each(function() c:close() end)

  it("keeps writers apart from readers and from each other across processes #slow", function()
    local name = helper.unique_name("rw")
    local file = ("%s/%s.count"):format(helper.tmp, name:gsub("%W", "_"))
    local nproc, iters = 4, 45
    local outs = helper.run_parallel(nproc, "rw_mix", srv.url, name, iters, file)
    local writes = 0
    for i = 1, nproc do
      local w, changes = outs[i]:match("done " .. i .. " (%d+) (%d+)")
      assert.truthy(w, outs[i])
      assert.equals("0", changes)               -- no writer while reading
      writes = writes + tonumber(w)
    end
    assert.equals(tostring(writes), helper.read_file(file))  -- no write lost
  end)

  it("lets a writer in once a stopped reader's lease ran out #timing", function()
    local name = helper.unique_name("rw")
    local reader = helper.spawn("rw_read_hold", srv.url, name, 1)
    assert.truthy(helper.wait_for(function() return reader.output():match("held") end, 10))
    assert.is_true(reader.signal("STOP"))     -- its watchdog stops too
    finally(function() reader.signal("KILL") end)
    local w = c:rwlock(name).write
    local t0 = dlock.now()
    assert(w:acquire{ wait = 6 })
    assert.is_true(dlock.now() - t0 < 4, ("waited %.1f s"):format(dlock.now() - t0))
    assert(w:release())
  end)

  it("gives a stopped holder's permit back after its lease #timing", function()
    local name = helper.unique_name("sem")
    local holder = helper.spawn("sem_hold", srv.url, name, 1, 1)
    assert.truthy(helper.wait_for(function() return holder.output():match("held") end, 10))
    assert.is_true(holder.signal("STOP"))
    finally(function() holder.signal("KILL") end)
    local s = c:semaphore(name, 1)
    local t0 = dlock.now()
    local id = assert(s:acquire{ wait = 6 })
    assert.is_true(dlock.now() - t0 < 4, ("waited %.1f s"):format(dlock.now() - t0))
    assert.is_true(s:release(id))
  end)

  it("does not lose a released permit to a killed waiter #timing", function()
    local name = helper.unique_name("sem")
    local s = c:semaphore(name, 1)
    local held = assert(s:acquire())
    local queue = "dlock:{" .. name .. "}:q"
    local dead = helper.spawn("sem_wait", srv.url, name, 1)
    assert.truthy(helper.wait_for(function() return srv.cli("zcard", queue) == "1" end, 10))
    local live = helper.spawn("sem_wait", srv.url, name, 1)
    assert.truthy(helper.wait_for(function() return srv.cli("zcard", queue) == "2" end, 10))
    assert.is_true(dead.signal("KILL"))
    local t0 = dlock.now()
    assert.is_true(s:release(held))           -- may wake the dead one first
    assert.truthy(helper.wait_for(function() return live.output():match("got") end, 8),
      live.output())
    assert.is_true(dlock.now() - t0 < 5, ("took %.1f s"):format(dlock.now() - t0))
  end)

  it("waits in a scheduler's loop for each kind, and the loop runs on #timing", function()
    local cqueues = require "cqueues"             -- lua-cqueues: make deps installs it
    local sc = assert(dlock.connect{ url = srv.url, scheduler = "cqueues" })
    finally(function() sc:close() end)
    local name = helper.unique_name("fam")
    local rw, sem = sc:rwlock(name .. ":rw"), sc:semaphore(name .. ":sem", 1)
    local multi = sc:multi_lock{ name .. ":a", name .. ":b" }
    local held = {                              -- held by another client
      c:rwlock(name .. ":rw", { owner = "x" }).write,
      c:lock(name .. ":b", { owner = "x" }),
    }
    for _, l in ipairs(held) do assert(l:acquire()) end
    local csem = c:semaphore(name .. ":sem", 1)
    local permit = assert(csem:acquire())
    local q, ticks, got = cqueues.new(), 0, {}
    q:wrap(function()                           -- the loop's other work
      while #got < 3 do ticks = ticks + 1; cqueues.sleep(0.01) end
    end)
    q:wrap(function()
      assert(rw.read:acquire{ wait = 10 }); got[#got + 1] = "read"; assert(rw.read:release())
    end)
    q:wrap(function()
      local id = assert(sem:acquire{ wait = 10 }); got[#got + 1] = "permit"; assert(sem:release(id))
    end)
    q:wrap(function()
      assert(multi:acquire{ wait = 10 }); got[#got + 1] = "multi"; assert(multi:release())
    end)
    q:wrap(function()
      cqueues.sleep(0.4)
      assert.equals(0, #got)                    -- all three still wait...
      assert.is_true(ticks >= 10)               -- ...and the loop runs
      for _, l in ipairs(held) do assert(l:release()) end
      assert.is_true(csem:release(permit))
    end)
    assert(q:loop(15))
  end)
end)
