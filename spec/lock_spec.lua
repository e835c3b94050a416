local dlock = require "dlock"
local helper = require "helper"

local client, other

local function setup()
  client = assert(helper.client())
  other = assert(helper.client())          -- a second owner, same process
end

local function teardown()
  client:close()
  other:close()
end

describe("client:lock() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("makes a lock object without I/O, with its name", function()
    local l = client:lock("stock:42")
    assert.equals("stock:42", l.name)
    assert.is_false(l:held())
    assert.matches('dlock.Lock: "stock:42"', tostring(l))
  end)

  it("keeps the hold and its slot's fencing counter on one Cluster slot", function()
    local prefix = helper.unique_name("app") .. ":"
    local c = assert(helper.client{ prefix = prefix })
    local l = c:lock("a{b}c")
    assert(l:acquire())
    local srv = helper.redis()
    local key = prefix .. "{a{b}c}"
    assert.equals("1", helper.lock_field(srv, key, "n"))   -- the lock is at its key
    local fences = {}
    for k in srv.cli("keys", prefix .. "*:fence"):gmatch("[^\n]+") do
      fences[#fences + 1] = k
    end
    assert.equals(1, #fences)                   -- one counter per slot
    assert.equals("string", srv.cli("type", fences[1]))
    local slot = require("dlock.core").key_slot
    assert.equals(slot(key), slot(fences[1]))
    assert(l:release())
    c:close()
  end)

  it("is binary-safe", function()
    local name = "\0\1\255 bin\n" .. helper.unique_name()
    local l = client:lock(name)
    assert(l:acquire())
    assert.equals(name, l.name)
    assert.is_nil((other:lock(name):try_acquire()))
    assert(l:release())
  end)
end)

describe("lock:acquire() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("returns the lock itself", function()
    local l = client:lock(helper.unique_name())
    assert.equals(l, l:acquire())
    assert.is_true(l:held())
    assert(l:release())
  end)

  it("is reentrant for one owner and counts holds", function()
    local l = client:lock(helper.unique_name())
    local function inner() assert(l:acquire()); return l:count() end
    local function outer() assert(l:acquire()); return inner() end
    assert.equals(2, outer())
    assert.same({ true, 1 }, { l:release() })
    assert.same({ true, 0 }, { l:release() })
    assert.is_false(l:held())
  end)

  it("shares one hold between lock objects of the same name and owner", function()
    local name = helper.unique_name()
    local a, b = client:lock(name), client:lock(name)
    assert(a:acquire())
    assert(b:acquire())
    assert.equals(2, a:count())
    assert(b:release()); assert(a:release())
  end)

  it("makes other coroutines of the same client contend", function()
    local l = client:lock(helper.unique_name())
    assert(l:acquire())
    local co = coroutine.wrap(function()
      local ok, err = l:acquire{ wait = 0.05 }
      return ok, err, l:held(), l:count()
    end)
    local ok, err, held, count = co()
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert.is_false(held)
    assert.equals(0, count)
    assert.equals(1, l:count())
    assert(l:release())
  end)

  it("lets a coroutine be reentrant within itself", function()
    local l = client:lock(helper.unique_name())
    local co = coroutine.wrap(function()
      assert(l:acquire()); assert(l:acquire())
      coroutine.yield(l:count())
      assert(l:release()); assert(l:release())
      return l:held()
    end)
    assert.equals(2, co())
    local ok, err = l:try_acquire()      -- the main thread is another owner
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert.is_false(co())
  end)

  it("honours opts.owner to share a hold across coroutines", function()
    local name = helper.unique_name()
    local l = client:lock(name, { owner = "job-7" })
    assert(l:acquire())
    local n = coroutine.wrap(function() assert(l:acquire()); return l:count() end)()
    assert.equals(2, n)
    assert(l:release()); assert(l:release())
  end)

  it("fails with 'timeout' after wait when another owner holds it", function()
    local name = helper.unique_name()
    assert(other:lock(name):acquire())
    local ok, err = client:lock(name):acquire{ wait = 0.1 }
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert(other:lock(name):release())
  end)

  it("takes the lock's default options", function()
    local name = helper.unique_name()
    assert(other:lock(name):acquire())
    local l = client:lock(name, { wait = 0.05, lease = 2 })
    local ok, err = l:acquire()
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert(other:lock(name):release())
    assert(l:acquire())
    assert.is_true(l:ttl() <= 2)
    assert(l:release())
  end)

  it("with lease= sets a fixed lease that is not renewed", function()
    local l = client:lock(helper.unique_name())
    assert(l:acquire{ lease = 5 })
    local ttl = l:ttl()
    assert.is_true(ttl > 4 and ttl <= 5)
    assert.equals(0, client:stats().held)   -- not a watchdog hold
    assert(l:release())
  end)

  it("with wait=0 tries once", function()
    local name = helper.unique_name()
    assert(other:lock(name):acquire())
    local ok, err = client:lock(name):acquire{ wait = 0 }
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert(other:lock(name):release())
  end)

  it("fails with 'redis ...' when Redis answers an error", function()
    local name = helper.unique_name()
    helper.redis().cli("set", "dlock:{" .. name .. "}", "not a hash")
    local ok, err = client:lock(name):acquire()
    assert.is_nil(ok)
    assert.matches("^redis", err)
    assert.matches("WRONGTYPE", err)
    helper.redis().cli("del", "dlock:{" .. name .. "}")
  end)

  it("recovers when the server lost its scripts (NOSCRIPT) and functions", function()
    local l = client:lock(helper.unique_name())
    helper.redis().cli("script", "flush")
    helper.redis().cli("function", "flush")
    assert(l:acquire())
    assert(l:release())
  end)
end)

-- A reentry by the client that holds the tenancy, while its confirmed
-- deadline is ahead, is counted here alone, and so is its release: no
-- round trip, and Redis counts one hold per client and requester.
describe("a reentry #binding", function()
  local srv, c
  lazy_setup(function()
    srv = helper.start_redis()
    c = assert(dlock.connect{ url = srv.url, lease = 5 })
  end)
  lazy_teardown(function() c:close(); srv.stop() end)
  local function scripts_run() return helper.script_calls(srv) end
  local function counted(name)
    local lines = {}
    for x in helper.lock_hgetall(srv, "dlock:{" .. name .. "}"):gmatch("[^\n]+") do
      lines[#lines + 1] = x
    end
    local n = 0
    for i = 1, #lines - 1, 2 do
      if lines[i]:sub(1, 1) == "o" then n = n + tonumber(lines[i + 1]) end
    end
    return n
  end

  it("costs no round trip, and Redis counts the hold once", function()
    local name = helper.unique_name("re")
    local l = c:lock(name)
    assert(l:acquire())
    local before = scripts_run()
    for _ = 1, 3 do assert(l:acquire()) end
    assert.equals(4, l:count())
    assert.equals(1, counted(name))
    assert.same({ true, 3 }, { l:release() })
    assert.same({ true, 1 }, { l:release(), l:release() and 1 })
    assert.equals(before, scripts_run())            -- none of it was sent
    assert.same({ true, 0 }, { l:release() })        -- the last one is
    assert.equals(before + 1, scripts_run())
    assert.is_true(helper.is_free(srv, "dlock:{" .. name .. "}"))
  end)

  it("is sent when a fixed lease's reentry would outlast the hold's", function()
    local name = helper.unique_name("re")
    local l = c:lock(name)
    assert(l:acquire{ lease = 2 })
    local before = scripts_run()
    assert(l:acquire{ lease = 1 })                  -- within: counted here
    assert.equals(before, scripts_run())
    assert(l:acquire{ lease = 4 })                  -- raises the TTL
    assert.equals(before + 1, scripts_run())
    assert.is_true(tonumber(srv.cli("pttl", "dlock:{" .. name .. "}")) > 2500)
    assert.equals(2, counted(name))
    for _ = 1, 3 do assert(l:release()) end
    assert.is_true(helper.is_free(srv, "dlock:{" .. name .. "}"))
  end)

  it("is sent once the hold's deadline passed: a fresh hold", function()
    local name = helper.unique_name("re")
    local l = c:lock(name)
    assert(l:acquire{ lease = 0.1 })
    dlock.sleep(0.25)
    local before = scripts_run()
    assert(l:acquire())
    assert.equals(before + 1, scripts_run())
    assert.equals(1, l:count())
    assert.same({ true, 0 }, { l:release() })
  end)

  it("adds to a shared owner's holds as one per client", function()
    local name = helper.unique_name("re")
    local b = assert(dlock.connect(srv.url))
    finally(function() b:close() end)
    local la, lb = c:lock(name, { owner = "job" }), b:lock(name, { owner = "job" })
    assert(la:acquire()); assert(la:acquire())
    assert(lb:acquire())
    assert.equals(2, counted(name))                 -- one each
    assert(lb:release())
    assert(la:release())
    assert.is_false(helper.is_free(srv, "dlock:{" .. name .. "}"))
    assert.same({ true, 0 }, { la:release() })
    assert.is_true(helper.is_free(srv, "dlock:{" .. name .. "}"))
  end)
end)

describe("lock:try_acquire() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("acquires a free lock, and fails with 'timeout' on a held one", function()
    local name = helper.unique_name()
    local l = client:lock(name)
    assert.equals(l, l:try_acquire())
    local ok, err = other:lock(name):try_acquire()
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert(l:release())
  end)
end)

describe("lock:release() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("returns true and the remaining hold count", function()
    local l = client:lock(helper.unique_name())
    assert(l:acquire()); assert(l:acquire())
    assert.same({ true, 1 }, { l:release() })
    assert.same({ true, 0 }, { l:release() })
  end)

  it("deletes the key when the count reaches 0", function()
    local l = client:lock(helper.unique_name())
    assert(l:acquire())
    assert(l:release())
    assert.is_nil(l:ttl())
  end)

  it("fails with 'not held' for an owner that holds nothing", function()
    local name = helper.unique_name()
    assert(other:lock(name):acquire())
    local ok, err = client:lock(name):release()
    assert.is_nil(ok)
    assert.matches("^not held", err)
    assert.is_number(other:lock(name):ttl())   -- untouched
    assert(other:lock(name):release())
  end)

  it("fails with 'lost' when the lock was taken meanwhile", function()
    local name = helper.unique_name()
    local l = client:lock(name)
    assert(l:acquire())
    assert.is_true(other:lock(name):force_release())
    assert(other:lock(name):acquire())
    local ok, err = l:release()
    assert.is_nil(ok)
    assert.matches("^lost", err)
    assert.is_number(other:lock(name):ttl())   -- the new holder keeps it
    assert(other:lock(name):release())
    ok, err = l:release()
    assert.matches("^not held", err)
  end)
end)

describe("lock:held(), lock:count() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("tell this owner's state without I/O", function()
    local l = client:lock(helper.unique_name())
    assert.is_false(l:held()); assert.equals(0, l:count())
    assert(l:acquire()); assert(l:acquire())
    assert.is_true(l:held()); assert.equals(2, l:count())
    assert(l:release()); assert(l:release())
    assert.is_false(l:held()); assert.equals(0, l:count())
  end)
end)

describe("lock:ttl() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("is the server's remaining lease in seconds, nil when absent", function()
    local l = client:lock(helper.unique_name())
    assert.is_nil(l:ttl())
    assert(l:acquire{ lease = 3 })
    local t = l:ttl()
    assert.is_true(t > 2 and t <= 3)
    assert(l:release())
  end)
end)

describe("lock:token() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("is nil when not held", function()
    assert.is_nil(client:lock(helper.unique_name()):token())
  end)

  it("stays the same across reentrant holds", function()
    local l = client:lock(helper.unique_name())
    assert(l:acquire())
    local t = l:token()
    assert.is_true(math.type(t) == "integer")
    assert(l:acquire())
    assert.equals(t, l:token())
    assert(l:release()); assert(l:release())
  end)

  it("strictly increases each time the lock passes to a new owner", function()
    local name = helper.unique_name()
    local last = 0
    for i = 1, 6 do
      local c = (i % 2 == 0) and client or other
      local l = c:lock(name)
      assert(l:acquire())
      assert.is_true(l:token() > last)
      last = l:token()
      assert(l:release())
    end
  end)
end)

describe("lock:extend() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("resets the lease of a held lock", function()
    local l = client:lock(helper.unique_name())
    assert(l:acquire{ lease = 2 })
    assert.is_true(l:extend(20))
    assert.is_true(l:ttl() > 19)
    assert(l:release())
  end)

  it("fails with 'not held' otherwise", function()
    local ok, err = client:lock(helper.unique_name()):extend(5)
    assert.is_nil(ok)
    assert.matches("^not held", err)
  end)

  it("fails with 'lost' when the lock was deleted", function()
    local name = helper.unique_name()
    local l = client:lock(name)
    assert(l:acquire())
    assert.is_true(other:lock(name):force_release())
    local ok, err = l:extend(5)
    assert.is_nil(ok)
    assert.matches("^lost", err)
    assert.is_false(l:held())
  end)
end)

describe("lock:force_release() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("deletes the lock whoever holds it and says whether it existed", function()
    local name = helper.unique_name()
    assert(other:lock(name):acquire())
    assert.is_true(client:lock(name):force_release())
    assert.is_false(client:lock(name):force_release())
    assert(client:lock(name):try_acquire())
    assert(client:lock(name):release())
  end)
end)

describe("lock:with() #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("returns true and fn's results, releasing after", function()
    local l = client:lock(helper.unique_name())
    assert.same({ true, 3, "x" }, { l:with(function(a, b)
      assert.is_true(l:held())
      return a + b, "x"
    end, 1, 2) })
    assert.is_false(l:held())
  end)

  it("returns nil, err without calling fn when not acquired", function()
    local name = helper.unique_name()
    assert(other:lock(name):acquire())
    local called = false
    local ok, err = client:lock(name, { wait = 0 }):with(function() called = true end)
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert.is_false(called)
    assert(other:lock(name):release())
  end)

  it("releases and re-raises fn's error unchanged", function()
    local l = client:lock(helper.unique_name())
    local e = setmetatable({}, { __tostring = function() return "custom" end })
    local ok, got = pcall(l.with, l, function() error(e) end)
    assert.is_false(ok)
    assert.equals(e, got)
    assert.is_false(l:held())
    assert.is_nil(l:ttl())
  end)

  it("returns nil, 'lost', fn's results when the lease was lost in fn", function()
    local name = helper.unique_name()
    local l = client:lock(name)
    local res = { l:with(function()
      other:lock(name):force_release()
      return "work"
    end) }
    assert.is_nil(res[1])
    assert.matches("^lost", res[2])
    assert.equals("work", res[3])
  end)

  it("works through client:with(name, [opts,] fn, ...)", function()
    local name = helper.unique_name()
    assert.same({ true, 42 }, { client:with(name, function(x) return x end, 42) })
    assert.same({ true, "y" }, { client:with(name, { wait = 1 },
      function(x) return x end, "y") })
  end)
end)

describe("<close> (Lua 5.4) #binding", function()
  lazy_setup(setup)
  lazy_teardown(teardown)

  it("releases one hold on scope exit, also on error", function()
    if _VERSION ~= "Lua 5.4" then return pending("Lua 5.4 only") end
    local l = client:lock(helper.unique_name())
    local f = assert(load([[
      local l, fail = ...
      local h <close> = assert(l:acquire{ wait = 5 })
      assert(l:count() == 1)
      if fail then error("inside") end
      return l:count()
    ]]))
    assert.equals(1, f(l))
    assert.is_false(l:held())
    assert.error_matches(function() f(l, true) end, "inside")
    assert.is_false(l:held())
    assert.is_nil(l:ttl())
  end)
end)

describe("try_acquire on a busy lock #binding", function()
  it("returns nil, 'timeout' and the holder's remaining TTL", function()
    local holder, other = assert(helper.client()), assert(helper.client())
    local name = helper.unique_name("busy")
    assert(holder:lock(name):acquire{ lease = 20 })
    local ok, err, ttl = other:lock(name):try_acquire()
    assert.is_nil(ok)
    assert.equals("timeout", err)
    assert.is_number(ttl)
    assert.is_true(ttl > 15 and ttl <= 20, "ttl " .. tostring(ttl))
    -- The same from a wait that ran out, as of its last attempt.
    ok, err, ttl = other:lock(name):acquire{ wait = 0.1 }
    assert.is_nil(ok)
    assert.equals("timeout", err)
    assert.is_true(ttl > 15 and ttl <= 20, "ttl " .. tostring(ttl))
    holder:close()
    other:close()
  end)

  it("returns two values when it gets the lock or fails otherwise", function()
    local c = assert(helper.client())
    local lock = c:lock(helper.unique_name("free"))
    assert.equals(1, select("#", lock:try_acquire()))
    lock:release()
    c:close()
  end)
end)

describe("with() given options #binding", function()
  it("takes options on the lock as on the client", function()
    local c = assert(helper.client())
    local name = helper.unique_name("with")
    local holder = assert(helper.client())
    assert(holder:lock(name):acquire())
    local lock = c:lock(name)
    local ran = false
    local ok, err = lock:with({ wait = 0.1 }, function() ran = true end)
    assert.is_nil(ok)
    assert.equals("timeout", err)
    assert.is_false(ran)
    ok, err = c:with(name, { wait = 0.1 }, function() ran = true end)
    assert.is_nil(ok)
    assert.equals("timeout", err)
    assert.is_false(ran)
    holder:close()
    assert.same({ true, "a", 3 }, { lock:with({ wait = 1, expire = 5 }, function(x, y)
      assert.is_true(lock:ttl() <= 5)
      return x, y
    end, "a", 3) })
    -- a callable table is fn, not options
    local callable = setmetatable({}, { __call = function(_, x) return x * 2 end })
    assert.same({ true, 8 }, { lock:with(callable, 4) })
    c:close()
  end)
end)

describe("leases: 'expire' and 'watchdog_lease' #binding", function()
  it("'expire' is a fixed lifetime, never renewed; 'lease' is its old name", function()
    local c = assert(helper.client())
    for _, key in ipairs({ "expire", "lease" }) do
      local lock = c:lock(helper.unique_name("fixed"), { [key] = 0.3 })
      assert(lock:acquire())
      assert.is_true(lock:ttl() <= 0.3)
      dlock.sleep(0.6)
      assert.is_nil(lock:ttl())
      local ok, err = lock:release()
      assert.is_nil(ok)
      assert.matches("^lost", err)
    end
    assert.error_matches(function() c:lock("x", { expire = 1, lease = 1 }) end,
                         "'lease' is the old name of 'expire'")
    assert.error_matches(function() c:lock("x"):acquire{ expire = 1, watchdog_lease = 1 } end,
                         "not both")
    assert.error_matches(function() c:lock("x", { watchdog_lease = 0 }) end,
                         "'watchdog_lease'.*positive")
    c:close()
  end)

  it("'watchdog_lease' renews one lock on its own lease, beside the client's #timing", function()
    local c = assert(helper.client{ lease = 30 })
    local short = c:lock(helper.unique_name("short"), { watchdog_lease = 0.6 })
    local long = c:lock(helper.unique_name("long"))
    assert(short:acquire())
    assert(long:acquire())
    local before = c:stats().renewed
    dlock.sleep(1.5)                              -- 2.5 leases of the short one
    assert.is_true(short:held())
    local ttl = short:ttl()
    assert.is_true(ttl > 0 and ttl <= 0.6, "ttl " .. tostring(ttl))
    assert.is_true(long:ttl() > 25)
    assert.is_true(c:stats().renewed - before >= 2)
    -- A reentry keeps the hold's own lease; a per-call one works too.
    assert(short:acquire())
    assert.is_true(short:ttl() <= 0.6)
    assert.same({ true, 1 }, { short:release() })
    assert.same({ true, 0 }, { short:release() })
    local l3 = c:lock(helper.unique_name("call"))
    assert(l3:acquire{ watchdog_lease = 0.6 })
    dlock.sleep(1)
    assert.is_true(l3:held())
    assert.is_true(l3:ttl() <= 0.6)
    l3:release()
    c:close()
  end)
end)

describe("a reentrant acquire whose reply timed out #binding", function()
  it("leaves the counts of client and server equal", function()
    local srv = helper.start_redis("--enable-debug-command local")
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.2 })
    local name = helper.unique_name("drift")
    local key = "dlock:{" .. name .. "}"
    local l = c:lock(name)
    assert(l:acquire{ lease = 5 })
    local sleeper = helper.put_to_sleep(srv, 0.6)
    local ok, err = l:acquire{ lease = 10 }      -- raises the TTL: sent, and
                                                 -- run after the sleep
    assert.is_nil(ok)
    assert.matches("^connection", err)
    assert(helper.wait_for(function() return not sleeper.alive() end, 5))
    assert.equals(1, l:count())
    assert.same({ true, 0 }, { l:release() })    -- one release frees it
    assert(helper.wait_for(function() return helper.is_free(srv, key) end, 2))
    c:close()
    srv.stop()
  end)
end)

describe("two clients sharing an explicit owner #binding", function()
  it("add up their holds: the lock is free when both released", function()
    local a, b, probe = assert(helper.client()), assert(helper.client()), assert(helper.client())
    local name = helper.unique_name("shared")
    local la, lb = a:lock(name, { owner = "job-7" }), b:lock(name, { owner = "job-7" })
    assert(la:acquire())
    assert(lb:acquire())                         -- the same owner: reentry
    assert.equals(la:token(), lb:token())
    assert(la:release())
    assert.is_nil((probe:lock(name):try_acquire()))   -- B still holds it
    assert.is_true(lb:held())
    assert.same({ true, 0 }, { lb:release() })
    assert(probe:lock(name):try_acquire())
    assert(probe:lock(name):release())
    a:close(); b:close(); probe:close()
  end)

  -- Each client's share ends with its own lease: B's joins keep the key
  -- alive, but not the holds of a co-owner that was killed.
  it("free the lock within the killed client's lease, while the other joins and releases #timing", function()
    local name = helper.unique_name("shared")
    local w = helper.spawn("hold_forever", helper.url(), name, 1, "job")
    assert(helper.wait_for(function() return w.output():match("held") end, 10), w.output())
    local b, probe = assert(helper.client()), assert(helper.client())
    local lb, lp = b:lock(name, { owner = "job" }), probe:lock(name)
    assert(lb:acquire())
    w.signal("KILL")
    local killed, got = dlock.now(), false
    while not got and dlock.now() < killed + 10 do
      assert(lb:release())
      got = lp:try_acquire() ~= nil
      if not got then assert(lb:acquire{ expire = 30 }) end  -- B comes back, lease 30 s
      dlock.sleep(0.05)
    end
    assert.is_true(got, "the killed client's share kept the lock for 10 s")
    assert.is_true(dlock.now() - killed < 5, dlock.now() - killed)   -- its lease: 1 s
    assert(lp:release())
    b:close(); probe:close()
  end)
end)

describe("fencing keys #binding", function()
  it("stay bounded whatever the number of names", function()
    local srv = helper.start_redis()
    local c = assert(dlock.connect(srv.url))
    local names = 12000
    for i = 1, names do
      local l = c:lock("n" .. i)
      assert(l:acquire{ lease = 0.2 })
      assert(l:release())
    end
    dlock.sleep(0.5)                             -- the free locks' records expire
    local keys = tonumber(srv.cli("dbsize"))
    assert.is_true(keys <= 16384 and keys < names, keys .. " keys for " .. names .. " names")
    assert.equals("", srv.cli("keys", "dlock:{n*}"))   -- no lock left behind
    c:close()
    srv.stop()
  end)
end)
