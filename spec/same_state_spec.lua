-- Waits that would wait for their own Lua state: a wait that blocks the
-- state (no scheduler, or one that cannot yield there) for a lock another
-- owner of the same client holds ends at once, saying why; a release or
-- extend by the wrong coroutine says who holds; a blocking wait beside a
-- loaded event loop, and the old name 'lease', are logged once.
local dlock = require "dlock"
local helper = require "helper"

local SELF = "^timeout: held by another coroutine of this client; "
local NO_SCHED = "without a scheduler a wait blocks the Lua state"

-- A client whose log lines are kept in .logs.
local function logged_client(opts)
  local logs = {}
  local o = { log = function(level, msg) logs[#logs + 1] = level .. ": " .. msg end }
  for k, v in pairs(opts or {}) do o[k] = v end
  local c = assert(helper.client(o))
  return c, logs
end

-- Hold lock in a coroutine of its own that stays suspended (the owner).
local function hold_elsewhere(lock, opts)
  local co = coroutine.create(function()
    assert(lock:acquire(opts))
    coroutine.yield()
    return lock:release()
  end)
  assert(coroutine.resume(co))
  return co
end

local function count(logs, pattern)
  local n = 0
  for _, l in ipairs(logs) do if l:find(pattern) then n = n + 1 end end
  return n
end

describe("a wait for a lock another owner of this client holds #binding", function()
  it("returns at once, nil and a timeout saying so (no TTL: coming back later does not help) #timing", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local lock = c:lock(helper.unique_name("self"))
    local holder = hold_elsewhere(lock)
    for _, wait in ipairs({ 5, false }) do         -- a bound, and forever
      local t0 = dlock.now()
      local ok, err, ttl
      if wait then ok, err, ttl = lock:acquire{ wait = wait } else ok, err, ttl = lock:acquire() end
      local took = dlock.now() - t0
      assert.is_nil(ok)
      assert.matches(SELF, err)
      assert.truthy(err:find(NO_SCHED, 1, true), err)
      assert.truthy(err:find("connect{ scheduler = ... }", 1, true), err)
      assert.equals("timeout", err:match("^[^:]*"))  -- the code callers check
      assert.is_nil(ttl)
      assert.is_true(took < 2.5, ("took %.3f s"):format(took))   -- not the 5 s
    end
    assert.is_false(lock:held())
    assert.same({ true, true, 0 }, { coroutine.resume(holder) })
    assert(lock:acquire{ wait = 1 })               -- free: taken as usual
    assert(lock:release())
  end)

  it("answers a try (wait = 0) as before: plain timeout", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local lock = c:lock(helper.unique_name("try"))
    local holder = hold_elsewhere(lock)
    local ok, err = lock:try_acquire()
    assert.is_nil(ok)
    assert.equals("timeout", err)
    ok, err = lock:acquire{ wait = 0 }
    assert.equals("timeout", err)
    coroutine.resume(holder)
  end)

  it("with, a fair lock and both halves of a read-write lock end at once too #timing", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local name = helper.unique_name("kinds")
    local fair = c:fair_lock(name .. ":fair")
    local h1 = hold_elsewhere(fair)
    local t0 = dlock.now()
    local ok, err = fair:acquire{ wait = 5 }
    assert.is_nil(ok)
    assert.matches(SELF, err)
    ok, err = c:lock(name):with({ wait = 5 }, function() end)
    assert.is_true(ok)                              -- nobody holds that one
    local plain = c:lock(name)
    local h2 = hold_elsewhere(plain)
    ok, err = plain:with({ wait = 5 }, function() error("ran") end)
    assert.is_nil(ok)
    assert.matches(SELF, err)
    local rw = c:rwlock(name .. ":rw")
    local h3 = hold_elsewhere(rw.read)
    ok, err = rw.write:acquire{ wait = 5 }           -- a writer behind our reader
    assert.matches(SELF, err)
    coroutine.resume(h3)
    local h4 = hold_elsewhere(rw.write)
    ok, err = rw.read:acquire{ wait = 5 }            -- a reader behind our writer
    assert.matches(SELF, err)
    assert.is_true(dlock.now() - t0 < 2.5)           -- not one of the 5 s waits
    for _, h in ipairs({ h1, h2, h4 }) do coroutine.resume(h) end
    -- the fair waiter left the queue: another client gets the lock as soon
    -- as the watchdog has sent that (a release meanwhile may hand it to
    -- the leaver, which passes it on), well before a leftover's grant
    -- would run out (3 s)
    local other = assert(helper.client())
    assert(other:fair_lock(name .. ":fair"):acquire{ wait = 2.5 })
    assert.equals(0, other:inspect(name .. ":fair").waiters)
    other:close()
  end)

  it("names an explicit owner that holds it", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local name = helper.unique_name("owner")
    assert(c:lock(name, { owner = "job-7" }):acquire())
    local ok, err = c:lock(name):acquire{ wait = 5 }
    assert.is_nil(ok)
    assert.matches('^timeout: held by owner "job%-7" of this client; ', err)
    assert(c:lock(name, { owner = "job-7" }):release())
  end)

  it("says so where the client has a scheduler but the wait cannot yield", function()
    local c = assert(helper.client{ scheduler = { wait = function() coroutine.yield() end } })
    finally(function() c:close() end)
    local lock = c:lock(helper.unique_name("noyield"))
    local holder = hold_elsewhere(lock)
    local ok, err = lock:acquire{ wait = 5 }         -- the main thread cannot yield
    assert.is_nil(ok)
    assert.matches(SELF .. "this wait cannot yield to the scheduler", err)
    coroutine.resume(holder)
  end)

  it("waits as before where that hold's fixed lease ends within the wait #timing", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local lock = c:lock(helper.unique_name("fixed"))
    local holder = hold_elsewhere(lock, { expire = 0.3 })
    local t0 = dlock.now()
    assert(lock:acquire{ wait = 5 })                 -- after its lease
    assert.is_true(dlock.now() - t0 > 0.2)
    assert(lock:release())
    local ok, err = lock:acquire{ wait = 0.5 }       -- free again: ours at once
    assert(ok, err)
    assert(lock:release())
    -- but a fixed lease that outlasts the wait is waited for in vain
    local name2 = helper.unique_name("fixed2")
    local l2 = c:lock(name2)
    hold_elsewhere(l2, { expire = 10 })
    t0 = dlock.now()
    ok, err = l2:acquire{ wait = 2 }
    assert.matches(SELF, err)
    assert.is_true(dlock.now() - t0 < 1.5)           -- not the 2 s
    coroutine.resume(holder)
  end)

  it("waits as before for another client's hold, and for a semaphore's permits #timing", function()
    local c, other = assert(helper.client()), assert(helper.client())
    finally(function() c:close(); other:close() end)
    local name = helper.unique_name("others")
    assert(other:lock(name):acquire{ expire = 0.3 })
    local t0 = dlock.now()
    assert(c:lock(name):acquire{ wait = 5 })         -- after the other's lease
    assert.is_true(dlock.now() - t0 > 0.2)
    -- a permit of this client and one of another: a wait for the third
    -- waits for either (the other client's is freed by its lease)
    local sem, osem = c:semaphore(name .. ":sem", 2), other:semaphore(name .. ":sem", 2)
    local mine
    coroutine.wrap(function() mine = assert(sem:acquire()) end)()
    assert(osem:acquire{ expire = 0.3 })
    t0 = dlock.now()
    local id = assert(sem:acquire{ wait = 5 })
    assert.is_true(dlock.now() - t0 > 0.2)
    assert(sem:release(id))
    assert(sem:release(mine))
  end)
end)

describe("a release or extend by a coroutine that does not hold #binding", function()
  it("says that another coroutine of this client holds the lock", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local lock = c:lock(helper.unique_name("whose"))
    local holder = hold_elsewhere(lock)
    local want = "not held: held by another coroutine of this client " ..
                 "(owners are per coroutine; pass opts.owner to share)"
    assert.same({ nil, want }, { lock:release() })
    assert.same({ nil, want }, { lock:extend(5) })
    assert.same({ nil, want }, { lock:guard("GET", "x") })
    assert.same({ true, true, 0 }, { coroutine.resume(holder) })
    assert.same({ nil, "not held" }, { lock:release() })   -- nobody holds now
  end)

  it("says nothing more where the same coroutine holds the read half only", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local rw = c:rwlock(helper.unique_name("half"))
    assert(rw.read:acquire())
    assert.same({ nil, "not held" }, { rw.write:release() })
    assert(rw.read:release())
  end)
end)

describe("warnings through log, once per client #binding", function()
  it("a blocking wait while cqueues or luv is loaded and the client has no scheduler", function()
    local loops = {}
    for _, m in ipairs({ "cqueues", "luv" }) do
      if pcall(require, m) then loops[#loops + 1] = m end
    end
    if #loops == 0 then pending("needs lua-cqueues or lua-luv") return end
    local saved = {}
    for _, m in ipairs({ "cqueues", "luv" }) do saved[m] = package.loaded[m] end
    finally(function() for m, v in pairs(saved) do package.loaded[m] = v end end)
    for _, m in ipairs(loops) do
      package.loaded.cqueues, package.loaded.luv = nil, nil
      package.loaded[m] = saved[m]
      local c, logs = logged_client()
      local lock = c:lock(helper.unique_name("loop"))
      assert(lock:acquire{ wait = 0 })               -- a try never blocks long
      assert(lock:release())
      assert.equals(0, #logs)
      assert(lock:acquire{ wait = 1 })
      assert(lock:release())
      assert(lock:acquire{ wait = 1 })
      assert(lock:release())
      assert.equals(1, #logs, table.concat(logs, "\n"))
      assert.matches("^warn: a blocking wait with " .. m .. " loaded: ", logs[1])
      assert.truthy(logs[1]:find('scheduler = "' .. m .. '"', 1, true), logs[1])
      -- a client with a scheduler is not told
      local s, slogs = logged_client{ scheduler = m }
      assert(s:lock(helper.unique_name("loop")):acquire{ wait = 1 })
      assert.equals(0, #slogs)
      s:close()
      c:close()
    end
  end)

  it("'lease' on a lock or an acquire: the old name of 'expire'", function()
    local c, logs = logged_client()
    finally(function() c:close() end)
    local name = helper.unique_name("lease")
    local lock = c:lock(name, { lease = 5 })
    assert(lock:acquire())                           -- (log runs at the next call)
    assert.equals(1, count(logs, "is the old name of 'expire'"))
    assert(lock:release())
    assert(c:lock(name):acquire{ lease = 5 })
    assert.equals(1, count(logs, "is the old name of 'expire'"))  -- once per client
    assert.equals(1, count(logs, "watchdog does not renew"))
    local d, dlogs = logged_client()
    assert(d:lock(name .. "2"):try_acquire{ lease = 5 })
    assert.equals(1, count(dlogs, "is the old name of 'expire'"))
    assert(d:lock(name .. "3"):acquire{ expire = 5 })
    local sem = d:semaphore(name .. ":sem", 1)       -- a semaphore's own name
    assert(sem:acquire{ lease = 5 })
    assert.equals(1, count(dlogs, "'lease'"))
    d:close()
  end)

  it("'lease' on a semaphore's acquire: the old name of 'expire' too", function()
    local c, logs = logged_client()
    finally(function() c:close() end)
    local sem = c:semaphore(helper.unique_name("sem"), 2)
    local a = assert(sem:acquire{ lease = 5 })
    local b = assert(sem:acquire{ lease = 5 })
    c:ping()                                         -- (log runs at the next call)
    assert.equals(1, count(logs, "is the old name of 'expire'"))   -- once per client
    assert.equals(1, count(logs, "a semaphore's too"))
    -- a fixed lease, as with expire: the permit is not renewed
    local ttl = sem.held[a]:ttl()
    assert.is_true(ttl > 0 and ttl <= 5, tostring(ttl))
    assert(sem:release(a))
    assert(sem:release(b))
    local e, elogs = logged_client()
    local esem = e:semaphore(helper.unique_name("sem"), 1)
    assert(esem:release(assert(esem:acquire{ expire = 5 })))
    e:ping()
    assert.equals(0, count(elogs, "'lease'"))
    e:close()
  end)

  it("'lease' on a fair lock or a read-write lock too, and both names differing raise", function()
    for _, make in ipairs({ "fair_lock", "rwlock" }) do
      local c, logs = logged_client()
      local l = c[make](c, helper.unique_name(make), { lease = 5 })
      c:ping()
      assert.equals(1, count(logs, "is the old name of 'expire'"), make)
      assert.error_matches(function() c[make](c, "x", { lease = 5, expire = 6 }) end,
                           "bad option 'lease' to '" .. make .. "' %('lease' is the old name of 'expire'")
      assert.truthy(l)
      c:close()
    end
  end)
end)
