-- client:semaphore(name, permits): at most `permits` holders,
-- enforced in Redis on its clock; permits leased (renewed by the watchdog
-- without `lease`); a dead holder's permit comes back after its lease; a
-- released permit wakes one waiter.
local dlock = require "dlock"
local helper = require "helper"

describe("semaphore #binding", function()
  local srv, c, o
  lazy_setup(function() srv = helper.start_redis() end)
  lazy_teardown(function() srv.stop() end)
  before_each(function()
    c = assert(dlock.connect(srv.url))
    o = assert(dlock.connect(srv.url))
  end)
  after_each(function() c:close(); o:close() end)

  it("lets at most `permits` holders in, and a release lets the next in #timing", function()
    local name = helper.unique_name("sem")
    local s, s2 = c:semaphore(name, 2), o:semaphore(name, 2)
    assert.equals(2, s:available())
    local a = assert(s:acquire())
    local b = assert(s2:acquire())
    assert.is_string(a)
    assert.are_not.equal(a, b)
    assert.equals(0, s:available())
    local id, err, ttl = s:acquire{ wait = 0 }
    assert.is_nil(id)
    assert.matches("^timeout", err)
    assert.is_true(ttl > 0)
    local t0 = dlock.now()
    assert.is_nil((s2:acquire{ wait = 0.3 }))
    assert.is_true(dlock.now() - t0 >= 0.29)
    assert.is_true(s:release(a))
    assert.equals(1, s:available())
    local d = assert(s2:acquire{ wait = 1 })
    assert.is_true(s2:release(d))
    assert.is_true(s2:release(b))
    assert.equals(2, s:available())
  end)

  it("answers release with true, 'not held' or 'lost', and raises on misuse", function()
    local name = helper.unique_name("sem")
    local s = c:semaphore(name, 1)
    local a = assert(s:acquire())
    assert.is_true(s:release(a))
    assert.same({ nil, "not held" }, { s:release(a) })
    assert.same({ nil, "not held" }, { s:release("nobody") })
    local b = assert(s:acquire())
    srv.cli("del", "dlock:{" .. name .. "}")
    local ok, err = s:release(b)
    assert.is_nil(ok)
    assert.matches("^lost", err)
    assert.has_error(function() c:semaphore(name, 0) end,
      "bad argument #2 to 'semaphore' (number of permits (a positive integer) expected, got integer)")
    assert.has_error(function() c:semaphore("", 1) end,
      "bad argument #1 to 'semaphore' (non-empty semaphore name expected, got an empty string)")
    assert.has_error(function() s:acquire{ expire = 1, lease = 2 } end,
      "bad option 'lease' to 'acquire' ('lease' is the old name of 'expire': give one of them)")
    assert.has_error(function() s:acquire{ watchdog_lease = 1 } end,
      "bad option 'watchdog_lease' to 'acquire' (unknown option)")
    assert.has_error(function() s:acquire{ expire = -1 } end,
      "bad option 'expire' to 'acquire' (negative duration)")
    assert.has_error(function() s:release(1) end,
      "bad argument #1 to 'release' (permit id expected, got number)")
  end)

  it("renews a permit held without expire, and ends one with expire #timing", function()
    local short = assert(dlock.connect{ url = srv.url, lease = 0.6 })
    finally(function() short:close() end)
    local name = helper.unique_name("sem")
    local s = short:semaphore(name, 1)
    local a = assert(s:acquire())
    dlock.sleep(1.5)                           -- 2.5 leases: renewed
    assert.equals(0, s:available())
    assert.is_true(short:stats().renewed >= 2)
    assert.is_true(s:release(a))
    local b = assert(s:acquire{ expire = 0.4 })
    dlock.sleep(0.7)
    assert.equals(1, s:available())            -- it ended by itself
    assert.matches("^lost", select(2, s:release(b)))
  end)

  it("gives a dead holder's permit back after its lease #timing", function()
    local name = helper.unique_name("sem")
    local holder = helper.spawn("sem_hold", srv.url, name, 1, 1)
    assert(helper.wait_for(function() return holder.output():match("held") end, 10))
    local s = c:semaphore(name, 1)
    assert.is_nil((s:acquire{ wait = 0 }))
    assert.is_true(holder.signal("KILL"))
    local t0 = dlock.now()
    local id = assert(s:acquire{ wait = 5 })   -- lease 1 s, plus slack
    assert.is_true(dlock.now() - t0 < 3)
    assert.is_true(s:release(id))
  end)

  it("takes a waiter that gives up out of the queue (a release wakes the next)", function()
    local name = helper.unique_name("sem")
    local s, s2 = c:semaphore(name, 1), o:semaphore(name, 1)
    local a = assert(s:acquire())
    assert.is_nil((s2:acquire{ wait = 0.2 }))   -- queued while it waited
    assert.is_nil((s2:acquire{ wait = 0 }))
    local keys = srv.cli("keys", "*" .. name .. "*")
    assert.truthy(keys:find(name, 1, true))
    assert.is_nil(keys:match(":q%f[%s%z]"), keys)   -- (an empty queue is no key)
    assert.is_true(s:release(a))
  end)

  it("wakes one waiting client per released permit", function()
    local name = helper.unique_name("sem")
    local s = c:semaphore(name, 1)
    local held = assert(s:acquire())
    local w1 = helper.spawn("sem_wait", srv.url, name, 1)
    local w2 = helper.spawn("sem_wait", srv.url, name, 1)
    local queue = "dlock:{" .. name .. "}:q"
    assert.truthy(helper.wait_for(function() return srv.cli("zcard", queue) == "2" end, 10),
      "the two waiters never queued")
    -- and subscribed, each to its client's channel (a release before that
    -- would be found by the retry that follows a subscription, no wake)
    assert.truthy(helper.wait_for(function()
      local _, n = srv.cli("pubsub", "channels", "dlock:{" .. name .. "}:ch:*"):gsub("[^\n]+", "")
      return n == 2
    end, 10), "the two waiters never subscribed")
    assert.is_true(s:release(held))
    -- one of them gets the permit; the other stays queued until that one
    -- releases it 0.3 s later
    local first, second
    assert.truthy(helper.wait_for(function()
      if w1.output():match("got") then first, second = w1, w2
      elseif w2.output():match("got") then first, second = w2, w1 end
      return first
    end, 5))
    assert.is_nil(second.output():match("got"))
    assert.truthy(helper.wait_for(function() return second.output():match("released") end, 10))
    -- each was woken by one message: the second was not woken by the
    -- release that went to the first
    -- (at most one: a waiter whose retry after subscribing met the
    -- release takes its permit with no wake at all)
    assert.is_true(tonumber(first.output():match("got (%d+)")) <= 1)
    assert.is_true(tonumber(second.output():match("got (%d+)")) <= 1)
  end)

  it("keeps its request records bounded while it is never free", function()
    -- A record stays while a resend of its request may come (twice its
    -- lease, src/redis/scripts/lib/prune.lua), so the bound is the requesters of
    -- the last two leases and two prunes: with a 0.3 s lease, 150 permits
    -- come and go; a prune stamps their release records, and the first
    -- prune after those times (a second after the last) drops them.
    local short = assert(dlock.connect{ url = srv.url, lease = 0.3 })
    local name = helper.unique_name("sem")
    local s = short:semaphore(name, 2)
    local keep = assert(s:acquire())           -- never free from here on
    for _ = 1, 150 do assert(s:release(assert(s:acquire()))) end
    for _ = 1, 2 do
      dlock.sleep(1.2)
      assert(s:release(assert(s:acquire())))
    end
    local fields = tonumber(srv.cli("hlen", "dlock:{" .. name .. "}"))
    assert.is_true(fields <= 70, fields .. " fields")
    assert.is_true(s:release(keep))
    short:close()
  end)

  it("keeps the limit across processes", function()
    local name = helper.unique_name("sem")
    local dir = helper.tmp .. "/" .. name:gsub("%W", "_")
    assert(os.execute("mkdir -p " .. dir))
    local nproc = 4
    local outs = helper.run_parallel(nproc, "sem_count", srv.url, name, 2, 30, dir)
    local most = 0
    for i = 1, nproc do
      local m = tonumber(outs[i]:match("done " .. i .. " (%d+)"))
      assert.truthy(m, outs[i])
      most = math.max(most, m)
    end
    assert.is_true(most <= 2, "saw " .. most .. " holders at once")
    assert.equals(2, c:semaphore(name, 2):available())
  end)
end)
