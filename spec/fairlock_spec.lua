-- client:fair_lock(name): waiters are served in arrival order;
-- the release script grants the lock to the first live waiter and tells
-- that waiter's client alone; a waiter that dies or gives up leaves the
-- queue within a bounded time, and a grant to one that has gone is taken
-- back and passed on.
local dlock = require "dlock"
local helper = require "helper"

describe("fair lock #binding", function()
  local srv, c, o
  lazy_setup(function() srv = helper.start_redis() end)
  lazy_teardown(function() srv.stop() end)
  before_each(function()
    c = assert(dlock.connect(srv.url))
    o = assert(dlock.connect(srv.url))
  end)
  after_each(function() c:close(); o:close() end)

  local function queue(name) return "dlock:{" .. name .. "}:q" end
  -- How many wait on name.
  local function waiting(name) return tonumber(helper.lock_field(srv, queue(name), "c")) or 0 end
  local function got(w) return w.output():match("got") end

  -- Spawn waiters one by one, each queued before the next starts.
  local function queue_up(name, n, hold)
    local ws = {}
    for i = 1, n do
      ws[i] = helper.spawn("fair_wait", srv.url, name, hold)
      assert.truthy(helper.wait_for(function() return waiting(name) == i end, 10),
        "waiter " .. i .. " never queued")
    end
    return ws
  end

  it("is a lock: reentrant, with tokens, with, <close>, ttl, extend", function()
    local name = helper.unique_name("fair")
    local l = c:fair_lock(name)
    assert.equals(l, l:acquire())
    local t = l:token()
    assert.equals(l, l:acquire())
    assert.equals(2, l:count())
    assert.equals(t, l:token())
    assert.is_true(l:ttl() > 0)
    assert.is_true(l:extend(60))
    assert.is_true(l:release())
    assert.is_true(l:release())
    assert.is_false(l:held())
    local ok, t2 = l:with(function() return l:token() end)
    assert.is_true(ok)
    assert.is_true(t2 > t)
    local other = o:fair_lock(name)
    assert.equals(other, other:try_acquire())    -- free again
    assert.is_true(other:release())
    if _VERSION == "Lua 5.4" then                -- no <close> before 5.4
      local f = assert(load([[
        local l = ...
        do local x <close> = assert(l:acquire()) end
        return l:held()
      ]]))
      assert.is_false(f(l))
    end
    -- extend sets the lease, shorter too
    local e = c:fair_lock(name)
    assert(e:acquire{ expire = 20 })
    assert.is_true(e:extend(1))
    assert.is_true(e:ttl() <= 1)
    assert.is_true(e:release())
    assert.has_error(function() c:fair_lock("") end,
      "bad argument #1 to 'fair_lock' (lock name must not be empty)")
  end)

  it("serves waiters in arrival order, each told by its own grant", function()
    local name = helper.unique_name("fair")
    local l = c:fair_lock(name)
    assert(l:acquire())
    local ws = queue_up(name, 4, 0.2)
    assert.is_true(l:release())
    local order = {}
    for i, w in ipairs(ws) do
      assert.truthy(helper.wait_for(function() return w.output():match("released") end, 15),
        "waiter " .. i .. ": " .. w.output())
      local tok, wakeups, at = w.output():match("got (%d+) (%d+) (%S+)")
      order[i] = { i = i, tok = tonumber(tok), at = tonumber(at) }
      -- one wake-up each: a release wakes its grantee alone, no herd
      assert.equals("1", wakeups)
    end
    table.sort(order, function(a, b) return a.at < b.at end)
    for k, x in ipairs(order) do
      assert.equals(k, x.i)                     -- FIFO
      if k > 1 then assert.is_true(x.tok > order[k - 1].tok) end
    end
  end)

  it("lets nobody barge in ahead of a waiter", function()
    local name = helper.unique_name("fair")
    local l = c:fair_lock(name)
    assert(l:acquire())
    local w = queue_up(name, 1, 0.5)[1]
    assert.is_true(l:release())
    -- the lock went to the waiter inside the release: a try right after
    -- it finds it held, from this client or another
    assert.is_nil((l:try_acquire()))
    assert.is_nil((o:fair_lock(name):try_acquire()))
    assert.truthy(helper.wait_for(function() return got(w) end, 10))
    assert(l:acquire{ wait = 10 })
    -- (the grant may reach us before the waiter hears its release went well)
    assert.truthy(helper.wait_for(function() return w.output():match("released true") end, 5))
    assert.is_true(l:release())
  end)

  it("passes over a waiter killed in the queue, and takes back its grant #timing", function()
    local name = helper.unique_name("fair")
    local l = c:fair_lock(name)
    assert(l:acquire())
    local ws = queue_up(name, 2, 0.1)
    assert.is_true(ws[1].signal("KILL"))
    local t0 = dlock.now()
    -- the dead waiter is first; its registration may still be live, so the
    -- lock may be granted to it: then the grant ends within 3 s, and the
    -- live waiter, coming back within 2 s, takes it
    assert.is_true(l:release())
    assert.truthy(helper.wait_for(function() return got(ws[2]) end, 15), ws[2].output())
    assert.is_true(dlock.now() - t0 < 8, "took " .. (dlock.now() - t0))
    assert.truthy(helper.wait_for(function() return ws[2].output():match("released true") end, 5))
  end)

  it("passes over a stopped waiter, which gets its turn once it runs again", function()
    local name = helper.unique_name("fair")
    local l = c:fair_lock(name)
    assert(l:acquire())
    local ws = queue_up(name, 2, 0.1)
    assert.is_true(ws[1].signal("STOP"))
    dlock.sleep(3.5)                            -- its registration ran out
    assert.is_true(l:release())
    assert.truthy(helper.wait_for(function() return got(ws[2]) end, 10), ws[2].output())
    assert.is_nil(got(ws[1]))
    assert.is_true(ws[1].signal("CONT"))
    assert.truthy(helper.wait_for(function() return ws[1].output():match("released true") end, 15),
      ws[1].output())
  end)

  it("gives a killed holder's lock to the first waiter after its lease #timing", function()
    local name = helper.unique_name("fair")
    local holder = helper.spawn("fair_hold", srv.url, name, 1)
    assert.truthy(helper.wait_for(function() return holder.output():match("held") end, 10))
    local l = c:fair_lock(name)
    local ws = queue_up(name, 1, 0.1)
    assert.is_true(holder.signal("KILL"))
    local t0 = dlock.now()
    assert.truthy(helper.wait_for(function() return got(ws[1]) end, 10), ws[1].output())
    assert.is_true(dlock.now() - t0 < 5)        -- lease 1 s, back within 2 s
    assert(l:acquire{ wait = 10 })
    assert.is_true(l:release())
  end)

  it("leaves the queue when a wait times out, passing on what it was granted", function()
    local name = helper.unique_name("fair")
    local l = c:fair_lock(name)
    assert(l:acquire())
    local mine = o:fair_lock(name)
    local ok, err, ttl = mine:acquire{ wait = 0.3 }
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert.is_true(ttl > 0)
    -- the cancel goes out from the watchdog: the queue empties
    assert.truthy(helper.wait_for(function()
      return not ("\n" .. srv.cli("hkeys", queue(name))):find("\nr")
    end, 5), helper.lock_hgetall(srv, queue(name)))
    assert.equals(0, waiting(name))
    local w = { helper.spawn("fair_wait", srv.url, name, 0.1) }
    assert.truthy(helper.wait_for(function() return waiting(name) == 1 end, 10))
    assert.is_true(l:release())
    assert.truthy(helper.wait_for(function() return got(w[1]) end, 5), w[1].output())
  end)

  it("does not take a grant it hears after the grant could have ended", function()
    local name = helper.unique_name("fair")
    local first = c:fair_lock(name, { owner = "first" })
    local other = o:fair_lock(name, { owner = "other" })
    assert(first:acquire())
    local events = {}
    -- a host loop that stalls 3.5 s right after the grant was sent: the
    -- grant's 3 s run out unread, and another client takes the lock
    local sc = assert(dlock.connect{ url = srv.url, scheduler = { wait = function(_, t)
      if #events == 0 then
        events[1] = "stalled"
        assert(first:release())                 -- granted to the waiter
        dlock.sleep(3.5)
        assert(other:try_acquire())
        events[2] = "other holds"
      elseif #events == 2 then
        events[3] = "other released"
        assert(other:release())
      else
        dlock.sleep(math.min(t, 0.05))
      end
    end } })
    finally(function() sc:close() end)
    coroutine.wrap(function()
      local w = sc:fair_lock(name)
      assert(w:acquire{ wait = 20 })
      events[#events + 1] = "waiter holds"
      assert(w:release())
    end)()
    assert.same({ "stalled", "other holds", "other released", "waiter holds" }, events)
  end)

  it("takes no forged grant: a grant carries the waiter's secret", function()
    local name = helper.unique_name("fair")
    local key = "dlock:{" .. name .. "}"
    local holder = c:fair_lock(name, { owner = "holder" })  -- released elsewhere
    assert(holder:acquire())
    local events, forged = {}, {}
    -- Anyone who may PUBLISH can learn a waiter's client id (CLIENT LIST
    -- names, or the queue) and the seq it queued with (its registration,
    -- "until:seq:..."), and publish "<seq>:<token>" on its channel, with
    -- the grant's parts in either order and guessed secrets too. The host
    -- loop forges while the waiter is parked in it (so the seq it reads is
    -- the one the waiter waits with), three times, then releases: the
    -- real grant is the hold, taken at once (no wait after the release).
    local sc = assert(dlock.connect{ url = srv.url, scheduler = { wait = function(_, t)
      if #forged < 3 then
        local r = helper.lock_field(srv, queue(name), "H")
        local seq = helper.lock_field(srv, queue(name), "r" .. r):match("^%d+:(%d+):")
        assert(seq, helper.lock_hgetall(srv, queue(name)))
        local chan = key .. ":ch:" .. r:match("^[^|:]*")
        for _, m in ipairs({ seq .. ":999999:", seq .. ":999999:0", seq .. ":0:999999",
                             seq .. ":0000000000000000:999999", seq .. ":999999",
                             seq .. ":999999:0000000000000000" }) do
          assert.equals("1", srv.cli("publish", chan, m))  -- the waiter listens
        end
        forged[#forged + 1] = seq
        events[#events + 1] = "forged"
        dlock.sleep(0.2)                        -- the messages reach its socket
      elseif #events == 3 then
        events[4] = "holder released"
        assert.is_true(holder:release())       -- granted to the waiter
        dlock.sleep(0.2)
      else
        events[#events + 1] = "waited after the release"
        dlock.sleep(math.min(t, 0.05))
      end
    end } })
    finally(function() sc:close() end)
    local tok, held, released
    coroutine.wrap(function()
      local w = sc:fair_lock(name)
      assert(w:acquire{ wait = 20 })
      tok, held = w:token(), helper.lock_field(srv, key, "t")
      events[#events + 1] = tostring(tok) == held and "waiter holds its grant"
        or ("waiter holds forged token %s (the lock's is %s)"):format(tok, held)
      released = w:release()
    end)()
    assert.same({ "forged", "forged", "forged", "holder released", "waiter holds its grant" },
      events)
    assert.equals(3, #forged)
    assert.is_true(released)
  end)

  it("keeps the holds of one owner shared by two clients apart", function()
    local name = helper.unique_name("fair")
    local a = c:fair_lock(name, { owner = "X" })
    local b = o:fair_lock(name, { owner = "X" })
    assert(a:acquire())
    assert(b:acquire())                         -- joins: the same owner
    assert.is_true(a:release())
    assert(a:acquire())                         -- joins again: adopts nothing
    assert.equals("2", helper.lock_field(srv, "dlock:{" .. name .. "}", "oX"))
    assert.is_true(b:release())
    local third = assert(dlock.connect(srv.url))
    finally(function() third:close() end)
    assert.is_nil((third:fair_lock(name):try_acquire()))   -- a still holds
    assert.is_true(a:release())
    assert(third:fair_lock(name):try_acquire())
  end)

  it("passes the lock on when its holder's client closes #timing", function()
    local name = helper.unique_name("fair")
    local mine = assert(dlock.connect(srv.url))
    assert(mine:fair_lock(name):acquire())
    local w = queue_up(name, 1, 0.1)[1]
    local t0 = dlock.now()
    mine:close()                                -- drops the hold: passed on
    assert.truthy(helper.wait_for(function() return got(w) end, 10), w.output())
    assert.is_true(dlock.now() - t0 < 1.5, "took " .. (dlock.now() - t0))
  end)

  it("gives mutual exclusion across processes, tokens in order #slow", function()
    local nproc, iters = 4, 60
    local outs, count, toks = helper.count_under_lock(nproc, "fair_counter", srv.url,
      helper.unique_name("fair"), iters)
    for i = 1, nproc do assert.matches("done " .. i, outs[i]) end
    assert.equals(tostring(nproc * iters), count)
    assert.equals(nproc * iters, #toks)
    for k = 2, #toks do assert.is_true(toks[k] > toks[k - 1]) end
  end)

  it("waits under a scheduler, in arrival order #timing", function()
    local cqueues = require "cqueues"             -- lua-cqueues: make deps installs it
    local name = helper.unique_name("fair")
    local held = c:fair_lock(name, { owner = "first" })  -- released elsewhere
    assert(held:acquire())
    local sc = assert(dlock.connect{ url = srv.url, scheduler = "cqueues" })
    finally(function() sc:close() end)
    local q, order = cqueues.new(), {}
    for i = 1, 3 do
      q:wrap(function()
        cqueues.sleep(0.2 * i)                  -- queue one after another
        local l = sc:fair_lock(name)
        assert(l:acquire{ wait = 10 })
        order[#order + 1] = i
        cqueues.sleep(0.05)
        assert(l:release())
      end)
    end
    q:wrap(function()
      cqueues.sleep(0.9)
      assert(held:release())
    end)
    assert(q:loop(20))
    assert.same({ 1, 2, 3 }, order)
  end)
end)
