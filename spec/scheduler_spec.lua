-- Waits that yield: with connect{ scheduler = ... }, a
-- coroutine waiting for a lock yields to its loop, and coroutines of one
-- Lua state contend like threads. Each scheduler runs the same specs: the
-- table form driven by a tick loop here, cqueues, and luv.
local dlock = require "dlock"
local helper = require "helper"

-- A scope that holds the lock through <close> (Lua 5.4 syntax, so that
-- this file still loads on 5.3).
local close_scope = _VERSION == "Lua 5.4" and assert(load([[
  local lock = ...
  local held <close> = assert(lock:acquire{ wait = 5 })
  return lock:count()
]]))

-- A scheduler kind: how to start coroutines, sleep in one, and run the
-- loop until every coroutine has ended (with a bound, so a bug fails the
-- spec instead of hanging it).
local kinds = {}

kinds.table = function()
  local cos, sleeping = {}, {}
  local k = {}
  k.option = { wait = function() coroutine.yield() end }
  function k.spawn(fn) cos[#cos + 1] = coroutine.create(fn) end
  function k.sleep(s)
    local until_t = dlock.now() + s
    while dlock.now() < until_t do coroutine.yield() end
  end
  function k.run(bound)
    local deadline = dlock.now() + bound
    k.ticks = 0
    repeat
      local alive = 0
      for _, co in ipairs(cos) do
        if coroutine.status(co) ~= "dead" then
          alive = alive + 1
          assert(coroutine.resume(co))
        end
      end
      k.ticks = k.ticks + 1
      dlock.sleep(0.001)                          -- one tick
    until alive == 0 or dlock.now() > deadline
    assert(dlock.now() <= deadline, "the loop did not end in time")
  end
  return k
end

kinds.cqueues = function()
  local ok, cqueues = pcall(require, "cqueues")
  if not ok then return nil end
  local cq = cqueues.new()
  local k = { option = "cqueues" }
  function k.spawn(fn) cq:wrap(fn) end
  k.sleep = cqueues.sleep
  function k.run(bound)
    local deadline = dlock.now() + bound
    k.ticks = 0
    cq:wrap(function()
      while not cq:empty() and dlock.now() < deadline do
        k.ticks = k.ticks + 1
        cqueues.sleep(0.001)
        if cq:count() <= 1 then break end          -- only this ticker left
      end
    end)
    while not cq:empty() do
      assert(cq:step(0.05))
      assert(dlock.now() <= deadline, "the loop did not end in time")
    end
  end
  return k
end

kinds.luv = function()
  local ok, uv = pcall(require, "luv")
  if not ok then return nil end
  local k = { option = "luv" }
  local live = 0
  function k.spawn(fn)
    live = live + 1
    local co = coroutine.create(function() fn(); live = live - 1 end)
    local timer = uv.new_timer()
    timer:start(0, 0, function() timer:close(); assert(coroutine.resume(co)) end)
  end
  function k.sleep(s)
    local co, t = coroutine.running(), uv.new_timer()
    t:start(math.ceil(s * 1000), 0, function() t:close(); assert(coroutine.resume(co)) end)
    coroutine.yield()
  end
  function k.run(bound)
    local deadline = dlock.now() + bound
    k.ticks = 0
    local tick = uv.new_timer()
    tick:start(1, 1, function()
      k.ticks = k.ticks + 1
      if live == 0 or dlock.now() > deadline then tick:stop(); tick:close() end
    end)
    uv.run()
    assert(dlock.now() <= deadline + 0.1, "the loop did not end in time")
  end
  return k
end

for _, kind in ipairs({ "table", "cqueues", "luv" }) do
  describe("scheduler " .. kind .. " #binding", function()
    local function new()
      local k = kinds[kind]()
      if not k then pending(kind .. " is not installed") end
      return k
    end
    local function client(k, opts)
      local o = { scheduler = k.option }
      for key, v in pairs(opts or {}) do o[key] = v end
      return assert(helper.client(o))
    end

    it("lets two coroutines of one state take turns on one lock, the loop ticking #timing", function()
      local k = new(); if not k then return end
      local c = client(k)
      local name = helper.unique_name("turns")
      local inside, max_inside, log = 0, 0, {}
      for _, id in ipairs({ "a", "b" }) do
        k.spawn(function()
          for _ = 1, 3 do
            local lock = c:lock(name)
            assert(lock:acquire())
            inside = inside + 1
            max_inside = math.max(max_inside, inside)
            log[#log + 1] = id
            k.sleep(0.03)                          -- hold it across ticks
            inside = inside - 1
            assert(lock:release())
            k.sleep(0.01)                          -- step back
          end
        end)
      end
      k.run(20)
      assert.equals(1, max_inside)
      assert.equals(6, #log)
      local a = select(2, table.concat(log):gsub("a", ""))
      assert.equals(3, a)
      assert.is_true(k.ticks > 10, "ticks " .. k.ticks)   -- the loop ran meanwhile
      assert.is_true(c:stats().waits >= 1)
      c:close()
    end)

    -- The default lock's starvation bound (src/redis/scripts/lib/waiter.lua):
    -- holds of 50 ms let each waiter wait past 10 ms, so a releaser that
    -- asks again at once is refused, and the lock goes round. Under luv
    -- and cqueues the releaser's own step reads the release message off
    -- the shared socket: the others are nudged (dlock/sched.lua), or they
    -- would sleep through their reservation, and each coroutine would take
    -- its three turns in a row. (Two in a row may happen: a waiter's
    -- first try may come late on a loaded machine.)
    it("passes the default lock round once a waiter waited past its bound #timing", function()
      local k = new(); if not k then return end
      local c = client(k)
      local name = helper.unique_name("round")
      local log = {}
      for _, id in ipairs({ "a", "b", "c" }) do
        k.spawn(function()
          local lock = c:lock(name)
          for _ = 1, 3 do
            assert(lock:acquire{ wait = 10 })
            log[#log + 1] = id
            k.sleep(0.05)
            assert(lock:release())             -- and at once again
          end
        end)
      end
      k.run(20)
      assert.equals(9, #log)
      for i = 3, #log do
        assert.is_false(log[i - 2] == log[i - 1] and log[i - 1] == log[i],
                        table.concat(log, " "))
      end
      c:close()
    end)

    it("wakes a waiter on release, long before the holder's lease #timing", function()
      local k = new(); if not k then return end
      local c = client(k, { lease = 30 })
      local name = helper.unique_name("wake")
      local waited, ticks_meanwhile
      k.spawn(function()
        local lock = c:lock(name)
        assert(lock:acquire())
        k.sleep(0.3)
        assert(lock:release())
      end)
      k.spawn(function()
        k.sleep(0.05)
        local t0, tick0 = dlock.now(), k.ticks or 0
        local lock = c:lock(name)
        assert(lock:acquire())
        waited = dlock.now() - t0
        ticks_meanwhile = (k.ticks or 0) - tick0
        lock:release()
      end)
      k.run(20)
      assert.is_true(waited > 0.15 and waited < 5, ("waited %.3f s"):format(waited))
      assert.is_true(ticks_meanwhile > 5, "ticks " .. ticks_meanwhile)
      c:close()
    end)

    it("honours wait, with the holder's TTL third, while other coroutines run #timing", function()
      local k = new(); if not k then return end
      local c = client(k)
      local holder = assert(helper.client())
      local name = helper.unique_name("bound")
      assert(holder:lock(name):acquire{ expire = 20 })
      local res, took
      k.spawn(function()
        local t0 = dlock.now()
        res = table.pack(c:lock(name):acquire{ wait = 0.3 })
        took = dlock.now() - t0
      end)
      k.run(20)
      assert.is_nil(res[1])
      assert.equals("timeout", res[2])
      assert.is_true(res[3] > 15)
      assert.is_true(took >= 0.29 and took < 5, ("took %.3f s"):format(took))
      assert.is_true(k.ticks > 20, "ticks " .. k.ticks)
      holder:close()
      c:close()
    end)

    it("keeps reentrancy per coroutine, with and <close> inside the loop", function()
      local k = new(); if not k then return end
      local c = client(k)
      local name = helper.unique_name("reenter")
      local results = {}
      k.spawn(function()
        local lock = c:lock(name)
        assert(lock:acquire())
        assert(lock:acquire())                     -- reentrant, at once
        results.count = lock:count()
        results.with = table.pack(lock:with(function() return lock:count() end))
        k.sleep(0.1)
        lock:release()
        lock:release()
      end)
      k.spawn(function()
        k.sleep(0.02)
        local lock = c:lock(name)
        results.other = lock:held()
        if close_scope then                        -- Lua 5.4: <close>
          results.later = close_scope(lock)
        else
          assert(lock:acquire{ wait = 5 })
          results.later = lock:count()
          lock:release()
        end
        results.after = lock:held()
      end)
      k.run(20)
      assert.equals(2, results.count)
      assert.same({ true, 3, n = 2 }, results.with)
      assert.is_false(results.other)
      assert.equals(1, results.later)
      assert.is_false(results.after)
      c:close()
    end)

    it("wakes every coroutine waiting on one lock #timing", function()
      local k = new(); if not k then return end
      local c = client(k)
      local name = helper.unique_name("many")
      local got = 0
      k.spawn(function()
        local lock = c:lock(name)
        assert(lock:acquire())
        k.sleep(0.2)
        lock:release()
      end)
      for _ = 1, 5 do
        k.spawn(function()
          k.sleep(0.05)
          local lock = c:lock(name)
          assert(lock:acquire{ wait = 10 })
          got = got + 1
          lock:release()
        end)
      end
      local t0 = dlock.now()
      k.run(20)
      assert.equals(5, got)
      assert.is_true(dlock.now() - t0 < 5)
      c:close()
    end)

    -- The core closes a broken subscriber socket and opens another, often
    -- under the same number: a scheduler that still watched the old one
    -- never saw the new one (a waiter woke 6 s after the release, at the
    -- holder's TTL), and cqueues raised from its loop.
    it("wakes waiters on release after their subscriber connection was killed mid-wait #timing", function()
      local k = new(); if not k then return end
      local c = client(k)
      local holder = assert(helper.client{ lease = 30 })
      local srv = helper.redis()
      local name = helper.unique_name("resub")
      local hl = holder:lock(name, { owner = "holder" })  -- released from a coroutine
      assert(hl:acquire())
      local got, released = {}, nil
      for i = 1, 3 do
        k.spawn(function()
          local lock = c:lock(name)
          assert(lock:acquire{ wait = 20 })
          got[#got + 1] = dlock.now() - released
          assert(lock:release())
        end)
      end
      k.spawn(function()
        for _ = 1, 3 do                        -- each time, a new socket
          k.sleep(0.3)
          srv.cli("client", "kill", "type", "pubsub")
        end
        k.sleep(0.5)                           -- subscribed again meanwhile
        released = dlock.now()
        assert(hl:release())
      end)
      k.run(30)
      assert.equals(3, #got)
      for _, t in ipairs(got) do
        assert.is_true(t < 2, ("a waiter got the lock %.2f s after the release"):format(t))
      end
      c:close(); holder:close()
    end)
  end)
end

describe("scheduler #binding", function()
  it("blocks as without one where the wait cannot yield (the main coroutine) #timing", function()
    local yielded = 0
    local c = assert(helper.client{ scheduler = { wait = function() yielded = yielded + 1 end } })
    local holder = assert(helper.client())
    local name = helper.unique_name("main")
    assert(holder:lock(name):acquire())
    local t0 = dlock.now()
    local ok, err = c:lock(name):acquire{ wait = 0.2 }
    assert.is_nil(ok)
    assert.equals("timeout", err)
    assert.is_true(dlock.now() - t0 >= 0.19)
    assert.equals(0, yielded)
    holder:close()
    c:close()
  end)

  it("gets the lock for a wait inside with's fn: yielding, or blocking on plain Lua 5.1", function()
    local yielded = 0
    local c = assert(helper.client{ scheduler = { wait = function()
      yielded = yielded + 1
      coroutine.yield()
    end } })
    local holder = assert(helper.client())
    local outer, inner = helper.unique_name("outer"), helper.unique_name("inner")
    assert(holder:lock(inner):acquire{ expire = 0.3 })
    local co = coroutine.create(function()
      return c:with(outer, function()
        local l = assert(c:lock(inner):acquire{ wait = 5 })
        return l:count(), l:release()
      end)
    end)
    local res, deadline = nil, dlock.now() + 10
    repeat
      res = { coroutine.resume(co) }
      assert(res[1], res[2])
      dlock.sleep(0.005)
    until coroutine.status(co) == "dead" or dlock.now() > deadline
    assert.same({ true, true, 1, true, 0 }, res)       -- resume ok, with's true, fn's results
    if _VERSION == "Lua 5.1" and not rawget(_G, "jit") then
      assert.equals(0, yielded)                        -- 5.1 cannot yield across pcall
    else
      assert.is_true(yielded >= 1, "yielded " .. yielded)
    end
    holder:close()
    c:close()
  end)

  it("blocks for a wait inside on_lost, which runs inside the library", function()
    local yielded, got = 0, nil
    local inner = helper.unique_name("inner")
    local c
    c = assert(helper.client{ lease = 0.3,
      scheduler = { wait = function() yielded = yielded + 1; coroutine.yield() end },
      on_lost = function() got = { c:lock(inner):acquire{ wait = 5 } } end })
    local holder = assert(helper.client())
    local name = helper.unique_name("lost")
    assert(holder:lock(inner):acquire{ expire = 0.5 })
    local co = coroutine.create(function()
      assert(c:lock(name):acquire())
      assert.is_true(holder:lock(name):force_release())   -- c's renewal finds it gone
      local deadline = dlock.now() + 5
      while not got and dlock.now() < deadline do
        c:poll()                                         -- on_lost runs here
        dlock.sleep(0.02)
      end
    end)
    local ok, err = coroutine.resume(co)
    assert(ok, err)
    assert.equals("dead", coroutine.status(co))
    assert.is_truthy(got and got[1], got and tostring(got[2]))
    assert.equals(0, yielded)
    holder:close()
    c:close()
  end)

  it("calls the table's wait with the subscriber socket and the time left", function()
    local calls = {}
    local c = assert(helper.client{ scheduler = { wait = function(fd, timeout)
      calls[#calls + 1] = { fd, timeout }
      coroutine.yield()
    end } })
    local holder = assert(helper.client())
    local name = helper.unique_name("args")
    assert(holder:lock(name):acquire())
    local co = coroutine.wrap(function() return c:lock(name):acquire{ wait = 2 } end)
    co()
    assert.is_true(#calls >= 1)
    assert.is_number(calls[1][1])
    assert.is_true(calls[1][2] > 0 and calls[1][2] <= 2)
    holder:close()                                -- releases: the next step gets it
    local deadline = dlock.now() + 5
    local res
    repeat res = co() until res or dlock.now() > deadline
    assert.is_truthy(res)
    c:close()
  end)

  it("raises for a bad scheduler, naming the option", function()
    assert.error_matches(function() dlock.connect{ scheduler = "tokio" } end,
      "bad option 'scheduler' to 'dlock.connect'.*tokio")
    assert.error_matches(function() dlock.connect{ scheduler = { } } end,
      "bad option 'scheduler' to 'dlock.connect'")
    assert.error_matches(function() dlock.connect{ scheduler = 5 } end,
      "bad option 'scheduler'")
  end)
end)

describe("examples/host, a C program embedding Lua #binding", function()
  it("keeps ticking while one of its jobs waits for a lock another holds", function()
    local build = os.getenv("DLOCK_BUILD") or "build"
    local host = build .. "/host"
    if not io.open(host) then pending(host .. " not built (make)") return end
    local f = assert(io.popen(("LUA_PATH='%s' LUA_CPATH='%s' %s examples/host/tick.lua '%s' 2>&1; echo \"exit=$?\"")
      :format(package.path, package.cpath, host, helper.url())))
    local out = f:read("*a")
    f:close()
    assert.matches("exit=0", out)
    assert.matches("waiter has the lock", out)
    local beats = tonumber(out:match("heartbeat ran (%d+) times"))
    assert.is_true(beats and beats > 150, out)
    assert.matches("host: 3 jobs, 0 failed", out)
  end)
end)
