-- client:rwlock(name): many readers or one writer, reentrant
-- per owner, a writer may take the read lock, a reader may not take the
-- write lock; each reader has its own lease; a waiting writer keeps new
-- readers out.
local dlock = require "dlock"
local helper = require "helper"

describe("rwlock #binding", function()
  local a, b, c
  before_each(function()
    a = assert(helper.client())
    b = assert(helper.client())
    c = assert(helper.client())
  end)
  after_each(function()
    a:close(); b:close(); c:close()
  end)

  it("lets many readers in, or one writer", function()
    local name = helper.unique_name("rw")
    local ra, rb, rc = a:rwlock(name), b:rwlock(name), c:rwlock(name)
    assert.equals(name, ra.name)
    assert(ra.read:acquire())
    assert(rb.read:acquire())
    assert.equals(ra.read:token(), rb.read:token())   -- one read tenancy
    local ok, err, ttl = rc.write:try_acquire()
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert.is_true(ttl > 0)
    local read_token = ra.read:token()
    assert(ra.read:release())
    assert.is_nil((rc.write:try_acquire()))
    assert(rb.read:release())
    assert(rc.write:acquire{ wait = 1 })
    assert.is_true(rc.write:token() > read_token)   -- a new tenancy
    assert.is_nil((ra.read:try_acquire()))
    assert.is_nil((rb.write:try_acquire()))
    assert(rc.write:release())
    assert(ra.read:try_acquire())
    assert(ra.read:release())
  end)

  it("is reentrant; a writer may take the read lock, a reader not the write lock", function()
    local name = helper.unique_name("rw")
    local ra, rb = a:rwlock(name), b:rwlock(name)
    assert(ra.write:acquire())
    assert(ra.write:acquire())
    assert.equals(2, ra.write:count())
    assert(ra.read:acquire())                  -- downgrade
    assert.equals(ra.write:token(), ra.read:token())
    assert.is_nil((rb.read:try_acquire()))     -- still a writer's
    assert.same({ true, 1 }, { ra.write:release() })
    assert(ra.write:release())
    assert(rb.read:try_acquire())              -- now readers share it
    assert.is_nil((c:rwlock(name).write:try_acquire()))
    local ok, msg = pcall(ra.write.acquire, ra.write)
    assert.is_false(ok)
    assert.matches("it would wait for itself", msg)
    assert.is_false(ra.write:held())
    assert(ra.read:release())
    assert(rb.read:release())
    assert(ra.write:try_acquire())             -- free again
    assert(ra.write:release())
  end)

  it("keeps new readers out while a writer waits, so writers are not starved", function()
    local name = helper.unique_name("rw")
    local ra, rc = a:rwlock(name), c:rwlock(name)
    assert(ra.read:acquire())
    local writer = helper.spawn("rw_write", helper.url(), name, 10)
    -- once the writer is waiting, a new reader is turned away
    assert.truthy(helper.wait_for(function()
      if rc.read:try_acquire() then rc.read:release(); return false end
      return true
    end, 10, 0.02), "the waiting writer never kept readers out")
    assert.matches("waiting", writer.output())
    assert(ra.read:acquire())                  -- a holder may still re-enter
    assert(ra.read:release())
    assert(ra.read:release())                  -- the last reader leaves
    assert.truthy(helper.wait_for(function() return writer.output():match("got") end, 5))
    assert.truthy(helper.wait_for(function() return writer.output():match("release") end, 5))
    assert(rc.read:acquire{ wait = 2 })        -- readers again
    assert(rc.read:release())
  end)

  it("gives each reader its own lease: a dead reader blocks writers for its lease only #timing", function()
    local name = helper.unique_name("rw")
    local long = assert(dlock.connect{ url = helper.url(), lease = 10 })
    finally(function() long:close() end)
    local dead = helper.spawn("rw_read_hold", helper.url(), name, 1)
    assert(helper.wait_for(function() return dead.output():match("held") end, 10))
    local live = long:rwlock(name)
    assert(live.read:acquire())                -- renewed for 10 s at a time
    assert.is_true(dead.signal("KILL"))
    dlock.sleep(0.3)
    assert(live.read:release())
    -- the key itself lives on for the live reader's 10 s lease; the dead
    -- reader's own lease (1 s) is what the writer waits for
    local t0 = dlock.now()
    local w = c:rwlock(name).write
    assert(w:acquire{ wait = 6 })
    assert.is_true(dlock.now() - t0 < 4, ("the writer waited %.1f s"):format(dlock.now() - t0))
    assert(w:release())
  end)

  it("ends a fixed-lease writer's hold with its lease, not with an earlier holder's", function()
    local name = helper.unique_name("rw")
    local long = assert(dlock.connect{ url = helper.url(), lease = 10 })
    finally(function() long:close() end)
    local r = long:rwlock(name).read
    assert(r:acquire())
    assert(r:release())             -- the freed lock keeps its record for 10 s
    local w = a:rwlock(name).write
    assert(w:acquire{ expire = 0.5 })
    assert.is_true(w:ttl() <= 0.5)
    -- the writer never releases (as if it died): its lease ends it
    assert.truthy(helper.wait_for(function() return b:rwlock(name).read:try_acquire() end, 3, 0.05),
      "the write hold outlived its lease")
    assert(b:rwlock(name).read:release())
  end)

  it("has its readers and writers renewed by the watchdog #timing", function()
    local name = helper.unique_name("rw")
    local short = assert(dlock.connect{ url = helper.url(), lease = 0.6 })
    finally(function() short:close() end)
    local rw = short:rwlock(name)
    assert(rw.read:acquire())
    dlock.sleep(1.5)
    assert.is_true(rw.read:held())
    assert.is_nil((c:rwlock(name).write:try_acquire()))
    assert(rw.read:release())
    assert(rw.write:acquire())
    dlock.sleep(1.5)
    assert.is_true(rw.write:held())
    assert.is_nil((c:rwlock(name).read:try_acquire()))
    assert.is_true(short:stats().renewed >= 4)
    assert(rw.write:release())
  end)

  it("works with with, <close> and extend on each half", function()
    local rw = a:rwlock(helper.unique_name("rw"))
    local ok, v = rw.read:with(function() return rw.read:held() end)
    assert.is_true(ok)
    assert.is_true(v)
    assert(rw.write:acquire())
    assert.is_true(rw.write:extend(20))
    assert.is_true(rw.write:ttl() > 10)
    assert(rw.write:release())
    assert(rw.read:acquire{ expire = 1 })
    assert.is_true(rw.read:extend(15))
    assert.is_true(rw.read:ttl() > 10)
    assert(rw.read:release())
    assert.same({ nil, "not held" }, { rw.read:release() })
  end)
end)

describe("rwlock under a lost reply #binding", function()
  local srv
  lazy_setup(function() srv = helper.start_redis("--enable-debug-command local") end)
  lazy_teardown(function() srv.stop() end)

  it("undoes a read acquire whose reply never came, and leaves no reader behind", function()
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.2 })
    local other = assert(dlock.connect(srv.url))
    finally(function() c:close(); other:close() end)
    local name = helper.unique_name("rw")
    local rw = c:rwlock(name)
    local sleeper = helper.put_to_sleep(srv, 0.6)
    local ok, err = rw.read:acquire()          -- sent, reply never read
    assert.is_nil(ok)
    assert.matches("^connection", err)
    assert(helper.wait_for(function() return not sleeper.alive() end, 5))
    local key = "dlock:{" .. name .. "}"
    assert(helper.wait_for(function() return srv.cli("exists", key) == "1" end, 2))
    assert(rw.read:acquire())                  -- cancels the first, then takes it
    assert.equals(1, rw.read:count())
    assert.same({ true, 0 }, { rw.read:release() })
    local w = other:rwlock(name).write         -- no reader is left: at once
    assert(w:try_acquire())
    assert(w:release())
  end)
end)
