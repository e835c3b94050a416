-- client:multi_lock{ ... }: one lock over several names, all
-- or none, deadlock-free in any order, one fencing token per name.
local dlock = require "dlock"
local helper = require "helper"

local function names(n)
  local base, t = helper.unique_name("multi"), {}
  for i = 1, n do t[i] = base .. ":" .. string.char(96 + i) end
  return t
end

describe("multi_lock #binding", function()
  local c, other
  before_each(function()
    c = assert(helper.client())
    other = assert(helper.client())
  end)
  after_each(function()
    c:close()
    other:close()
  end)

  it("takes every name or none", function()
    local n = names(3)
    local busy = other:lock(n[2])
    assert(busy:acquire())
    local m = c:multi_lock{ n[3], n[1], n[2] }
    local ok, err, ttl = m:try_acquire()
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert.is_true(ttl > 0)
    assert.is_false(m:held())
    -- what it took before the busy name went back at once
    for _, name in ipairs({ n[1], n[3] }) do
      local l = other:lock(name)
      assert.truthy(l:try_acquire(), name .. " was kept")
      assert(l:release())
    end
    assert(busy:release())
    assert.equals(m, m:acquire{ wait = 1 })
    assert.is_true(m:held())
    for _, name in ipairs(n) do
      assert.is_nil((other:lock(name):try_acquire()), name .. " is not held")
    end
    local toks = m:tokens()
    for _, name in ipairs(n) do
      assert.is_true(math.type(toks[name]) == "integer" and toks[name] > 0)
      assert.equals(toks[name], c:lock(name):token())
    end
    local rel, left = m:release()
    assert.is_true(rel)
    assert.equals(0, left)
    assert.is_nil(m:tokens())
    for _, name in ipairs(n) do
      local l = other:lock(name)
      assert.truthy(l:try_acquire(), name .. " still held")
      assert(l:release())
    end
  end)

  it("gives up within wait on a name held elsewhere, and releases the rest #timing", function()
    local n = names(2)
    local busy = other:lock(n[2])
    assert(busy:acquire())
    local m = c:multi_lock(n)
    local t0 = dlock.now()
    local ok, err = m:acquire{ wait = 0.3 }
    assert.is_nil(ok)
    assert.matches("^timeout", err)
    assert.is_true(dlock.now() - t0 >= 0.29)
    assert.is_false(c:lock(n[1]):held())
    assert(busy:release())
  end)

  it("is reentrant per owner and works with with, <close>, ttl and extend", function()
    local m = c:multi_lock(names(2))
    assert(m:acquire())
    assert(m:acquire())
    assert.equals(2, m:count())
    local ok, left = m:release()
    assert.is_true(ok)
    assert.equals(1, left)
    assert.is_true(m:ttl() > 0)
    assert.is_true(m:extend(20))
    assert.is_true(m:ttl() > 10)
    assert(m:release())
    assert.equals(0, m:count())
    local r1, r2 = m:with(function(x) return x * 2 end, 21)
    assert.is_true(r1)
    assert.equals(42, r2)
    assert.is_false(m:held())
    if _VERSION == "Lua 5.4" then            -- <close> (loaded: 5.3 has no such syntax)
      assert.is_true(assert(load([[
        local m = ...
        local held <close> = assert(m:acquire())
        return held:held()
      ]]))(m))
    end
    assert.is_false(m:held())
    assert.same({ nil, "not held" }, { m:release() })
  end)

  it("frees every name with force_release", function()
    local n = names(2)
    local m = other:multi_lock(n)
    assert(m:acquire())
    assert.is_true(c:multi_lock(n):force_release())
    assert.is_false(c:multi_lock(n):force_release())
    assert.matches("^lost", select(2, m:release()))
  end)

  it("raises on misuse, naming the argument", function()
    assert.has_error(function() c:multi_lock("a") end,
      "bad argument #1 to 'multi_lock' (table of lock names expected, got string)")
    assert.has_error(function() c:multi_lock{} end,
      "bad argument #1 to 'multi_lock' (at least one lock name expected)")
    assert.has_error(function() c:multi_lock{ "a", 2 } end,
      "bad argument #1 to 'multi_lock' (name #2: a non-empty string expected, got number)")
    assert.has_error(function() c:multi_lock{ "a" }:token() end,
      "a multi-lock has one fencing token per name: use tokens()")
  end)

  it("never deadlocks, and loses no update, across processes naming the locks in opposite orders", function()
    local n = names(3)
    local prefix = helper.tmp .. "/" .. n[1]:gsub("%W", "_") .. "."
    local nproc, iters = 4, 40
    local outs = helper.run_parallel(nproc, "multi", helper.url(), table.concat(n, ","),
      iters, prefix)
    for i = 1, nproc do assert.matches("done " .. i, outs[i]) end
    for _, name in ipairs(n) do
      assert.equals(tostring(nproc * iters), helper.read_file(prefix .. name:gsub("%W", "_")))
    end
  end)
end)

-- Whatever ends an acquire (a return, an error, a
-- cancelled coroutine), no name stays held that the caller does not hold.
-- The dlock command's scheduler raises on a signal; here a table
-- scheduler's wait yields and raises when told to, as that one does.
describe("an acquire ended by an error or a cancel #binding", function()
  local c, other, signalled
  local function raising_wait()
    coroutine.yield()
    if signalled then error({ signal = "INT" }, 0) end
  end
  before_each(function()
    signalled = false
    c = assert(helper.client{ scheduler = { wait = raising_wait } })
    other = assert(helper.client())
  end)
  after_each(function()
    c:close()
    other:close()
  end)

  -- Whether `name` is held by anyone, as Redis says.
  local function held_by_anyone(name)
    return assert(other:inspect(name) or false) and true
  end
  local function free(name) return other:inspect(name) == nil end

  -- A coroutine of c waiting in m:acquire for n[2] (held by other), n[1]
  -- free. Returns it suspended in the scheduler's wait.
  local function parked(m, wrap)
    local co = coroutine.create(wrap or function() return m:acquire{ wait = 30 } end)
    assert(coroutine.resume(co))
    assert.equals("suspended", coroutine.status(co))
    return co
  end

  it("holds no name once the scheduler's wait raised out of the coroutine", function()
    local n = names(2)
    local busy = other:lock(n[2])
    assert(busy:acquire())
    local m = c:multi_lock(n)
    local co = parked(m)
    for _ = 1, 3 do assert(coroutine.resume(co)) end   -- waits on, woken early
    signalled = true
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.same({ signal = "INT" }, err)               -- the error unchanged
    assert.equals("dead", coroutine.status(co))        -- co stays referenced: no GC
    assert.is_false(m:held())
    assert.is_true(free(n[1]), "the first name is still held")
    assert.equals(0, c:stats().held)
    dlock.sleep(0.3)                                   -- nothing takes it later
    assert.is_true(free(n[1]))
    assert(busy:release())
    assert.is_true(free(n[2]))
    -- (co waited long: n[2] is reserved for it, for at most 0.25 s, as for
    -- a waiter that died: src/redis/scripts/lib/waiter.lua)
    dlock.sleep(0.3)
    -- and the multi-lock works afterwards, in another coroutine
    signalled = false
    local co2 = coroutine.create(function()
      assert.equals(m, m:acquire{ wait = 5 })
      coroutine.yield("held")
      assert(m:release())
    end)
    assert.same({ true, "held" }, { coroutine.resume(co2) })
    assert.is_true(held_by_anyone(n[1]) and held_by_anyone(n[2]))
    assert(coroutine.resume(co2))
    assert.equals("dead", coroutine.status(co2))
    assert.is_true(free(n[1]) and free(n[2]))
    local _ = co
  end)

  it("holds no name when the error on the second name is caught inside the coroutine", function()
    -- On 5.2+ and LuaJIT pcall lets the wait yield, and the raise comes
    -- later; on plain 5.1 the wait's yield under pcall is itself the error.
    local n = names(3)
    local busy = other:lock(n[2])
    assert(busy:acquire())
    local m = c:multi_lock(n)
    local result
    local co = coroutine.create(function()
      result = { pcall(m.acquire, m, { wait = 30 }) }
      return m:held(), c:lock(n[1]):count()
    end)
    local ok, held, count = coroutine.resume(co)
    assert.is_true(ok)
    if coroutine.status(co) == "suspended" then        -- the wait yielded
      signalled = true
      ok, held, count = coroutine.resume(co)
      assert.is_true(ok)
    end
    assert.equals("dead", coroutine.status(co))
    assert.is_false(result[1])
    assert.is_false(held)
    assert.equals(0, count)                            -- the coroutine's own count
    assert.is_true(free(n[1]), "the first name is still held")
    assert.is_true(free(n[3]))
    assert(busy:release())
  end)

  it("holds no name when a wait that never yields raises at once", function()
    local n = names(2)
    local busy = other:lock(n[2])
    assert(busy:acquire())
    local boom = assert(helper.client{ scheduler = { wait = function() error("boom", 0) end } })
    finally(function() boom:close() end)
    local m = boom:multi_lock(n)
    local ok, err = coroutine.resume(coroutine.create(function() return m:acquire() end))
    assert.is_false(ok)
    assert.equals("boom", err)
    assert.is_true(free(n[1]), "the first name is still held")
    assert(busy:release())
  end)

  it("holds no name when a cqueues wait raises", function()
    local okq, cqueues = pcall(require, "cqueues")
    if not okq then pending("cqueues is not installed"); return end
    local n = names(2)
    local busy = other:lock(n[2])
    assert(busy:acquire())
    local stop = false
    local cc = assert(helper.client{ scheduler = { wait = function(fd, timeout)
      timeout = math.min(timeout, 0.02)
      if fd then cqueues.poll({ pollfd = fd, events = "r" }, timeout) else cqueues.sleep(timeout) end
      if stop then error("interrupted", 0) end
    end } })
    finally(function() cc:close() end)
    local m = cc:multi_lock(n)
    local q = cqueues.new()
    q:wrap(function() m:acquire{ wait = 30 } end)
    q:wrap(function() cqueues.sleep(0.2); stop = true end)
    local ok, err = q:loop(5)
    assert.is_false(ok)
    assert.matches("interrupted", tostring(err))
    assert.is_false(m:held())
    assert.is_true(free(n[1]), "the first name is still held")
    assert(busy:release())
  end)

  it("holds no name once a coroutine waiting in it is closed (Lua 5.4)", function()
    if not coroutine.close then pending("coroutine.close is Lua 5.4's"); return end
    local n = names(2)
    local busy = other:lock(n[2])
    assert(busy:acquire())
    local m = c:multi_lock(n)
    local co = parked(m)
    assert.is_true(coroutine.close(co))
    assert.is_true(free(n[1]), "the first name is still held")
    dlock.sleep(0.3)
    assert.is_true(free(n[1]))
    assert(busy:release())
    local _ = co
  end)

  for _, explicit in ipairs({ false, true }) do
    it(("holds no name once a coroutine waiting in it is dropped (%s owner)")
       :format(explicit and "explicit" or "coroutine"), function()
      local n = names(2)
      local busy = other:lock(n[2])
      assert(busy:acquire())
      local m = c:multi_lock(n, explicit and { owner = helper.unique_name("job") } or nil)
      local co = parked(m)
      co = nil                                         -- never resumed again
      collectgarbage(); collectgarbage()
      -- the watchdog releases a collected coroutine's holds: within a beat
      assert.truthy(helper.wait_for(function() return free(n[1]) end, 2),
        "the first name is still held")
      dlock.sleep(0.3)
      assert.is_true(free(n[1]))
      assert(busy:release())
      local _ = co
    end)
  end

  it("still takes every name or none, and yields, while others come and go", function()
    -- Names freed one by one while the multi-lock waits: it ends holding
    -- all of them, within wait.
    local n = names(3)
    local held = { other:lock(n[1]), other:lock(n[3]) }
    for _, l in ipairs(held) do assert(l:acquire()) end
    local m = c:multi_lock(n)
    local co = parked(m)
    local waits = 0
    for _, l in ipairs(held) do
      assert(l:release())
      for _ = 1, 5 do
        if coroutine.status(co) == "dead" then break end
        waits = waits + 1
        assert(coroutine.resume(co))
        dlock.sleep(0.01)
      end
    end
    for _ = 1, 100 do
      if coroutine.status(co) == "dead" then break end
      assert(coroutine.resume(co)); dlock.sleep(0.01)
    end
    assert.equals("dead", coroutine.status(co))
    for _, name in ipairs(n) do assert.is_false(free(name)) end
    assert.is_true(waits >= 1)
    c:close()                                          -- releases them
    for _, name in ipairs(n) do assert.is_true(free(name)) end
  end)
end)

-- The same for one lock: a lock whose wait raises keeps no hold, and one
-- queued in a fair lock's line leaves it within its 3 s lease.
describe("a lock's acquire ended by an error or a cancel #binding", function()
  local c, other, signalled
  before_each(function()
    signalled = false
    c = assert(helper.client{ scheduler = { wait = function()
      coroutine.yield()
      if signalled then error("interrupted", 0) end
    end } })
    other = assert(helper.client())
  end)
  after_each(function()
    c:close()
    other:close()
  end)

  for _, how in ipairs({ "raise", "close" }) do
    it(("keeps no hold when its wait %s"):format(how == "raise" and "raises" or
       "is closed (Lua 5.4)"), function()
      if how == "close" and not coroutine.close then pending("Lua 5.4 only"); return end
      local name = helper.unique_name("single")
      local busy = other:lock(name)
      assert(busy:acquire())
      local l = c:lock(name)
      local co = coroutine.create(function() return l:acquire{ wait = 30 } end)
      assert(coroutine.resume(co))
      assert.equals("suspended", coroutine.status(co))
      if how == "raise" then
        signalled = true
        local ok, err = coroutine.resume(co)
        assert.is_false(ok)
        assert.equals("interrupted", err)
      else
        assert.is_true(coroutine.close(co))
      end
      assert(busy:release())
      dlock.sleep(0.2)
      assert.is_nil(other:inspect(name), "the ended acquire took the lock")
      -- (a hold it kept would last the 30 s lease)
      local third = other:lock(name, { owner = "third" })
      assert.truthy(third:acquire{ wait = 2 })
      assert(third:release())
      assert.equals(0, c:stats().held)
      local _ = co
    end)
  end

  -- The default lock's starvation bound (src/redis/scripts/lib/waiter.lua): a
  -- waiter is the longest waiter (v) from its first busy try, and once it
  -- has waited 10 ms the release that frees the lock keeps it for that
  -- waiter for 0.25 s. A wait ended so gives the claim up at once (a
  -- cancel the watchdog sends), as a wait that times out does.
  for _, how in ipairs({ "raise", "close" }) do
    it(("gives up its claim as the longest waiter when its wait %s"):format(
       how == "raise" and "raises" or "is closed (Lua 5.4)"), function()
      if how == "close" and not coroutine.close then pending("Lua 5.4 only"); return end
      if _VERSION == "Lua 5.1" and not rawget(_G, "jit") then  -- (no yield across pcall:
        pending("not on plain Lua 5.1"); return                 -- the claim stays, as a
      end                                                       -- dead waiter's)
      local srv, name = helper.redis(), helper.unique_name("claim")
      local key = helper.lock_key(name)
      local busy = other:lock(name)
      assert(busy:acquire())
      local l = c:lock(name)
      local co = coroutine.create(function() return l:acquire{ wait = 30 } end)
      assert(coroutine.resume(co))
      assert.equals("suspended", coroutine.status(co))
      assert.matches("^%d+:", helper.lock_field(srv, key, "v"))        -- its claim
      if how == "raise" then
        signalled = true
        assert.is_false((coroutine.resume(co)))
      else
        assert.is_true(coroutine.close(co))
      end
      assert.truthy(helper.wait_for(function() return helper.lock_field(srv, key, "v") == "" end, 5),
                    "the claim stayed: " .. helper.lock_field(srv, key, "v"))
      assert(busy:release())
      assert.equals("", helper.lock_field(srv, key, "r"))              -- nothing reserved
      local third = other:lock(name, { owner = "third" })
      assert.truthy(third:try_acquire())                        -- nobody kept out
      assert(third:release())
      assert.equals(0, c:stats().held)
    end)
  end

  it("leaves a fair lock's queue within its lease when its wait raises #timing", function()
    local name = helper.unique_name("fairend")
    local busy = other:fair_lock(name)
    assert(busy:acquire())
    local l = c:fair_lock(name)
    local co = coroutine.create(function() return l:acquire{ wait = 30 } end)
    assert(coroutine.resume(co))
    signalled = true
    assert.is_false((coroutine.resume(co)))
    local t0 = dlock.now()
    assert(busy:release())                            -- may grant it to the gone waiter
    local fresh = other:fair_lock(name, { owner = "fresh" })
    assert(fresh:acquire{ wait = 10 })
    local took = dlock.now() - t0
    assert.is_true(took < 6, ("took %.1f s"):format(took))
    assert(fresh:release())
    assert.equals(0, c:stats().held)
    local _ = co
  end)
end)
