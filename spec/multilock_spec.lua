-- client:multi_lock{ ... } (issue 12): one lock over several names, all
-- or none, deadlock-free in any order, one fencing token per name.
local dlock = require "dlock"
local helper = require "helper"

local function names(n)
  local base, t = helper.unique_name("multi"), {}
  for i = 1, n do t[i] = base .. ":" .. string.char(96 + i) end
  return t
end

describe("multi_lock", function()
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

  it("gives up within wait on a name held elsewhere, and releases the rest", function()
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
